// shardcast-gui [PLAN.json]: the desktop planner.
// shardcast-gui --screenshot FILE.png|FILE.svg [--plan PLAN.json] [--view fit|memory|timeline|wrap|compare|history]
//               [--size WxH] [--run RUN.json] (history: built with the store): renders the window showing that view to FILE without a
// display and exits (0 written, 1 the file could not be written, 2 bad arguments or a bad plan).
#include <cstdio>
#include <optional>

#include <QApplication>
#include <QRegularExpression>
#include <QString>
#include <QStringList>

#include "gui/app/main_window.hpp"
#include "gui/state/planner.hpp"
#include "gui/views/compare_view.hpp"
#include "gui/widgets/export.hpp"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
constexpr int kScreenshotTimeoutMs = 300'000;

struct Args {
    QString plan;
    QString screenshot;
    QString view = "fit";
    QString run;
    int width = 1400, height = 900;
};

int badInput(const QString& message) {
    std::fprintf(stderr, "shardcast-gui: error: %s\n", message.toLocal8Bit().constData());
    return kExitBadInput;
}

// Parsed before QApplication exists (the platform is chosen from it). Empty optional: bad input, reported.
std::optional<Args> parseArgs(int argc, char** argv, QString& error) {
    Args a;
    QStringList rest;
    for (int i = 1; i < argc; ++i) rest << QString::fromLocal8Bit(argv[i]);
    for (qsizetype i = 0; i < rest.size(); ++i) {
        const QString& arg = rest[i];
        auto value = [&](const QString& flag) -> std::optional<QString> {
            if (i + 1 >= rest.size()) {
                error = flag + " needs a value";
                return std::nullopt;
            }
            return rest[++i];
        };
        if (arg == "--screenshot" || arg == "--plan" || arg == "--view" || arg == "--size" || arg == "--run") {
            auto v = value(arg);
            if (!v) return std::nullopt;
            if (arg == "--screenshot") a.screenshot = *v;
            if (arg == "--plan") a.plan = *v;
            if (arg == "--run") a.run = *v;
            if (arg == "--view") {
                if (!shardcast::gui::MainWindow::viewNames().contains(*v)) {
                    error = "--view: unknown view '" + *v + "'; valid: " + shardcast::gui::MainWindow::viewNames().join(", ");
                    return std::nullopt;
                }
                a.view = *v;
            }
            if (arg == "--size") {
                const auto m = QRegularExpression("^(\\d{2,5})x(\\d{2,5})$").match(*v);
                if (!m.hasMatch()) {
                    error = "--size: expected WxH in pixels, e.g. 1400x900 (got '" + *v + "')";
                    return std::nullopt;
                }
                a.width = m.captured(1).toInt();
                a.height = m.captured(2).toInt();
                if (a.width < 200 || a.height < 150 || a.width > 10000 || a.height > 10000) {
                    error = "--size: each side must be 200..10000 by 150..10000 pixels (got '" + *v + "')";
                    return std::nullopt;
                }
            }
        } else if (arg == "-h" || arg == "--help") {
            std::printf("usage: shardcast-gui [PLAN.json]\n"
                        "       shardcast-gui --screenshot FILE.png|FILE.svg [--plan PLAN.json] "
                        "[--view %s] [--size WxH] [--run RUN.json]\n",
                        qPrintable(shardcast::gui::MainWindow::viewNames().join('|')));
            std::exit(kExitOk);
        } else if (arg.startsWith("-")) {
            error = "unknown option '" + arg + "' (see --help)";
            return std::nullopt;
        } else if (a.plan.isEmpty()) {
            a.plan = arg;
        } else {
            error = "unexpected argument '" + arg + "'";
            return std::nullopt;
        }
    }
    if (a.screenshot.isEmpty() && (!a.run.isEmpty())) {
        error = "--run is only for --screenshot (open a run with File > Open run record)";
        return std::nullopt;
    }
    return a;
}

int screenshot(const Args& args) {
    using namespace shardcast::gui;
    MainWindow window(MainWindow::Options{false});
    QString failure;
    QObject::connect(window.planner(), &Planner::planFailed, [&failure](quint64, const QString& m) { failure = m; });
    const QString plan = args.plan.isEmpty() ? MainWindow::defaultPlanPath() : args.plan;
    if (auto s = window.openPlan(plan); !s) return badInput(QString::fromStdString(s.error().message));
    window.showView(args.view);
    if (!args.run.isEmpty()) {
        if (auto s = window.compareView()->loadRun(args.run); !s) return badInput(QString::fromStdString(s.error().message));
    }
    window.resize(args.width, args.height);
    window.show();
    if (!window.planner()->waitUntilFinished(kScreenshotTimeoutMs)) {
        std::fprintf(stderr, "shardcast-gui: error: planning took longer than %d s\n", kScreenshotTimeoutMs / 1000);
        return kExitFailure;
    }
    if (!window.currentPlan()) return badInput(plan + ": " + (failure.isEmpty() ? QString("no plan") : failure));
    QApplication::processEvents();
    window.resize(args.width, args.height);
    if (auto s = saveWidgetImage(&window, args.screenshot); !s) {
        std::fprintf(stderr, "shardcast-gui: error: %s\n", s.error().message.c_str());
        return kExitFailure;
    }
    return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
    QString error;
    const std::optional<Args> args = parseArgs(argc, argv, error);
    if (!args) return badInput(error);
    // A screenshot needs no display: the offscreen platform, unless the caller chose one.
    if (!args->screenshot.isEmpty() && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        qputenv("QT_QPA_PLATFORM", "offscreen");
    }
    QApplication app(argc, argv);
    QApplication::setOrganizationName("shardcast");
    QApplication::setApplicationName("shardcast-gui");
    if (!args->screenshot.isEmpty()) return screenshot(*args);

    shardcast::gui::MainWindow window;
    const QString plan = args->plan.isEmpty() ? shardcast::gui::MainWindow::defaultPlanPath() : args->plan;
    if (auto s = window.openPlan(plan); !s) {
        if (!args->plan.isEmpty()) return badInput(QString::fromStdString(s.error().message));
    }
    window.show();
    return app.exec();
}
