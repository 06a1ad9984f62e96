#include "gui/app/main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QCoreApplication>
#include <QDateTime>
#include <QDeadlineTimer>
#include <QEventLoop>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QVBoxLayout>

#include "core/base/file_io.hpp"
#include "gui/app/input_panel.hpp"
#include "gui/app/module_tree.hpp"
#include "gui/state/planner.hpp"
#include "gui/views/compare_view.hpp"
#include "gui/views/fit_view.hpp"
#include "gui/views/memory_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui/views/wrap_view.hpp"
#include "gui/widgets/export.hpp"
#include "gui/widgets/palette.hpp"
#include "gui/widgets/timeline_canvas.hpp"
#include "simulator/chrome_trace.hpp"
#ifdef SHARDCAST_GUI_WITH_STORE

#include "db/store.hpp"
#include "gui/views/history_view.hpp"
#include "planstore/planstore.hpp"
#include "planstore/trace_run.hpp"
#endif

namespace shardcast::gui {

namespace {
constexpr int kMaxRecent = 8;
#ifdef SHARDCAST_GUI_WITH_STORE
#endif
}  // namespace

QString MainWindow::defaultPlanPath() {
    const QString name = "llama-3.1-8b-8xh100.json";
    const QString installed = QDir(QCoreApplication::applicationDirPath()).filePath(SHARDCAST_EXAMPLES_DIR_FROM_BIN "/" + name);
    if (QFileInfo::exists(installed)) return QDir::cleanPath(installed);
    return QDir(SHARDCAST_SOURCE_EXAMPLES_DIR).filePath(name);
}

QStringList MainWindow::viewNames() {
#ifdef SHARDCAST_GUI_WITH_STORE
    return {"fit", "memory", "timeline", "wrap", "compare", "history"};
#else
    return {"fit", "memory", "timeline", "wrap", "compare"};
#endif
}

MainWindow::MainWindow(Options options) : m_options(options) {
    setWindowTitle("shardcast");
    m_planner = new Planner(this);
    m_inputs = new InputPanel;
    auto* dock = new QDockWidget("Plan", this);
    dock->setObjectName("inputs-dock");
    auto* scroll = new QScrollArea;
    scroll->setWidget(m_inputs);
    scroll->setWidgetResizable(true);
    scroll->setMinimumWidth(m_inputs->sizeHint().width() + 24);
    dock->setWidget(scroll);
    dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    addDockWidget(Qt::LeftDockWidgetArea, dock);
    m_modules = new ModuleTree;
    auto* tree_panel = new QWidget;
    auto* tree_layout = new QVBoxLayout(tree_panel);
    tree_layout->setContentsMargins(0, 0, 0, 0);
    tree_layout->addWidget(m_modules, 1);
    auto* wrap_checked = new QPushButton("Wrap the checked modules");
    wrap_checked->setToolTip("Make exactly the checked modules FSDP units (one fully_shard call per module).");
    tree_layout->addWidget(wrap_checked);
    connect(wrap_checked, &QPushButton::clicked, m_modules, &ModuleTree::applyChecked);
    connect(m_modules, &ModuleTree::unitsChosen, this, &MainWindow::wrapModules);
    auto* tree_dock = new QDockWidget("Module tree", this);
    tree_dock->setObjectName("module-tree-dock");
    tree_dock->setWidget(tree_panel);
    tree_dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    addDockWidget(Qt::LeftDockWidgetArea, tree_dock);
    tabifyDockWidget(dock, tree_dock);
    dock->raise();

    m_tabs = new QTabWidget;
    m_fit = new FitView;
    m_memory = new MemoryView;
    m_timeline = new TimelineView;
    m_wrap = new WrapView;
    m_compare = new CompareView;
    // Each view scrolls when the window is smaller than its minimum, so the window takes any size
    // (--screenshot --size) without being widened.
    auto addView = [this](QWidget* view, const QString& title) {
        m_tabs->addTab(scrollable(view), title);
    };
    addView(m_fit, "Fit");
    addView(m_memory, "Memory");
    addView(m_timeline, "Timeline");
    addView(m_wrap, "Wrap");
    addView(m_compare, "Compare");
#ifdef SHARDCAST_GUI_WITH_STORE
    m_history = new HistoryView;
    addView(m_history, "History");
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int i) {
        if (i == viewNames().indexOf("history")) {
            (void)m_history->refresh();
            refreshStoredProfiles();
        }
    });
    connect(m_history, &HistoryView::openPlanRequested, this, [this](const QString& id, const nlohmann::json& plan) {
        if (const QString path = writeStoreCopy(id, plan); !path.isEmpty() && openPlan(path).ok()) showView("fit");
    });
    // A run imported from traces is kept in the store, so the History view lists it.
    connect(m_compare, &CompareView::runImported, this, [this](const QString&) {
        const CompareData* d = m_compare->data();
        auto path = db::defaultDbPath();
        if (d == nullptr || !path) return;
        auto store = db::Store::open(*path, true);
        if (!store) {
            m_status->setText(QString::fromStdString(store.error().message));
            return;
        }
        const planstore::ResolvedProfile profile{d->prediction.profile, std::nullopt, "trace"};
        auto saved = planstore::saveMeasuredRun(**store, d->plan, d->prediction, profile, d->run, "");
        m_status->setText(saved ? QString("Imported run saved as %1 in the store").arg(QString::fromStdString(db::formatId(saved->run)))
                                : QString::fromStdString(saved.error().message));
        (void)m_history->refresh();
    });
    connect(m_history, &HistoryView::openRunRequested, this, [this](const QString& id, const nlohmann::json& record) {
        if (const QString path = writeStoreCopy(id, record); !path.isEmpty()) {
            showView("compare");
            (void)m_compare->loadRun(path);
        }
    });
#endif
    setCentralWidget(m_tabs);
    m_status = new QLabel;
    statusBar()->addWidget(m_status, 1);

    connect(m_inputs, &InputPanel::changed, this, &MainWindow::replan);
    connect(m_planner, &Planner::planReady, this, &MainWindow::onPlan);
    connect(m_planner, &Planner::planFailed, this, [this](quint64, const QString& message) {
        m_inputs->showError(message);
        m_status->setText("Not re-planned: " + message + " (the previous plan is shown)");
    });
    connect(m_planner, &Planner::strategiesReady, m_fit, &FitView::setStrategies);
    connect(m_planner, &Planner::wrapReady, m_wrap, &WrapView::setResult);
    connect(m_planner, &Planner::wrapReady, m_modules, &ModuleTree::setSearch);
    connect(m_fit, &FitView::strategyClicked, this,
            [this](core::Strategy s) { m_inputs->setKnob("strategy", toQString(core::strategyName(s))); });
    connect(m_wrap, &WrapView::candidateChosen, m_inputs, &InputPanel::applyCandidate);
    connect(m_wrap, &WrapView::optimizeRequested, this, &MainWindow::startOptimize);
    connect(m_wrap, &WrapView::loadWinnerRequested, this, [this] {
        if (auto s = loadOptimizeWinner(); !s) m_status->setText(QString::fromStdString(s.error().message));
    });

    buildMenus();
    refreshStoredProfiles();
    bool restored = false;
    if (m_options.use_settings) {
        QSettings settings("shardcast", "shardcast-gui");
        restored = restoreGeometry(settings.value("geometry").toByteArray());
        restoreState(settings.value("state").toByteArray());
    }
    if (!restored) resize(1400, 900);
}

MainWindow::~MainWindow() {
    if (m_optimizer) {
        m_optimize_cancel->cancel();
        m_optimizer->wait();
    }
}

void MainWindow::startOptimize() {
    if (!m_plan) {
        m_wrap->setOptimizeError("no plan yet");
        return;
    }
    if (m_optimizer) {
        m_optimize_cancel->cancel();
        m_optimizer->wait();
    }
    m_optimize_run.reset();
    m_optimize_cancel = std::make_shared<sim::CancelToken>();
    m_wrap->setOptimizeRunning();
    std::shared_ptr<const PlanResult> plan = m_plan;
    std::shared_ptr<sim::CancelToken> cancel = m_optimize_cancel;
    QThread* thread = QThread::create([this, plan, cancel] {
        auto run = computeOptimize(*plan, cancel.get());
        QMetaObject::invokeMethod(
            this,
            [this, cancel, run = std::move(run)]() mutable {
                if (cancel != m_optimize_cancel) return;  // a newer start replaced this one
                if (run) {
                    m_optimize_run = std::move(run).value();
                    m_wrap->setOptimizeResult(m_optimize_run);
                } else if (!run.error().cancelled) {
                    m_wrap->setOptimizeError(QString::fromStdString(run.error().message));
                }
            },
            Qt::QueuedConnection);
    });
    m_optimizer = thread;
    connect(thread, &QThread::finished, this, [this, thread] {
        if (m_optimizer == thread) m_optimizer = nullptr;
        thread->deleteLater();
    });
    thread->start();
}

bool MainWindow::waitForOptimize(int timeout_ms) {
    QDeadlineTimer deadline(timeout_ms);
    while (!m_optimize_run) {
        if (deadline.hasExpired()) return false;
        if (!m_optimizer) {
            // Finished (or never started): its result was posted before the thread finished.
            QCoreApplication::sendPostedEvents();
            return m_optimize_run != nullptr;
        }
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
        QCoreApplication::sendPostedEvents();
    }
    return true;
}

core::Status MainWindow::loadOptimizeWinner() {
    if (!m_optimize_run || !m_optimize_run->result.fits) return core::makeError("no optimizer winner to load");
    QDir dir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation));
    dir.mkpath("optimize");
    const QString path = dir.filePath(QString("optimize/winner-%1.json").arg(QDateTime::currentMSecsSinceEpoch()));
    if (auto s = core::writePlanFile(m_optimize_run->winner, path.toStdString()); !s) return s;
    return openPlan(path);
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu("&File");
    QAction* open = file->addAction("&Open plan...");
    open->setShortcut(QKeySequence::Open);
    connect(open, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, "Open plan", {}, "Plans (*.json)");
        if (!path.isEmpty()) (void)openPlan(path);
    });
    m_recent = file->addMenu("Open &recent");
    refreshRecentMenu();
    QAction* save = file->addAction("&Save plan...");
    save->setShortcut(QKeySequence::Save);
    connect(save, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, "Save plan", {}, "Plans (*.json)");
        if (path.isEmpty()) return;
        if (auto s = savePlan(path); !s) m_status->setText(QString::fromStdString(s.error().message));
    });
#ifdef SHARDCAST_GUI_WITH_STORE
    QAction* store = file->addAction("Save to s&tore");
    store->setShortcut(QKeySequence("Ctrl+Shift+S"));
    connect(store, &QAction::triggered, this, [this] {
        auto saved = saveToStore();
        m_status->setText(saved ? QString("Saved %1 in the store").arg(QString::fromStdString(*saved))
                                : QString::fromStdString(saved.error().message));
    });
#endif
    QAction* model = file->addAction("Open &model config...");
    connect(model, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, "Open model config", {}, "JSON (*.json)");
        if (!path.isEmpty()) m_inputs->openModelFile(path);
    });
    QAction* run = file->addAction("Open run &record...");
    connect(run, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, "Open run record", {}, "Run records (*.json)");
        if (path.isEmpty()) return;
        showView("compare");
        (void)m_compare->loadRun(path);
    });
    file->addSeparator();
    QAction* exportView = file->addAction("&Export view as PNG or SVG...");
    exportView->setShortcut(QKeySequence("Ctrl+E"));
    connect(exportView, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, "Export view", {}, "PNG (*.png);;SVG (*.svg)");
        if (path.isEmpty()) return;
        if (auto s = exportCurrentView(path); !s) m_status->setText(QString::fromStdString(s.error().message));
    });
    QAction* trace = file->addAction("Export timeline as &Chrome trace...");
    connect(trace, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, "Export Chrome trace", {}, "Chrome trace (*.json)");
        if (path.isEmpty()) return;
        if (auto s = exportChromeTrace(path); !s) m_status->setText(QString::fromStdString(s.error().message));
    });
    QAction* copy = file->addAction("Copy &PyTorch code");
    copy->setShortcut(QKeySequence("Ctrl+Shift+C"));
    connect(copy, &QAction::triggered, this, [this] { QApplication::clipboard()->setText(m_wrap->pytorchCode()); });
    file->addSeparator();
    QAction* quit = file->addAction("&Quit");
    quit->setShortcut(QKeySequence::Quit);
    connect(quit, &QAction::triggered, this, &QWidget::close);

    QMenu* view = menuBar()->addMenu("&View");
    // Zoom the timeline on screen (the timeline or the compare view); the canvas's own keys
    // (+, -, Ctrl+0, arrows) work when it has focus.
    auto zoom = [this, view](const QString& text, const QKeySequence& key, auto apply) {
        QAction* a = view->addAction(text);
        a->setShortcut(key);
        connect(a, &QAction::triggered, this, [this, apply] {
            const bool compare = m_tabs->currentIndex() == viewNames().indexOf("compare");
            TimelineCanvas* canvas = compare ? m_compare->canvas() : m_timeline->canvas();
            TimeAxis& axis = canvas->axis();
            apply(axis);
            canvas->update();
        });
    };
    zoom("Zoom &in", QKeySequence::ZoomIn, [](TimeAxis& a) { a.zoomAround(a.leftPx() + a.widthPx() / 2, 1.5); });
    zoom("Zoom &out", QKeySequence::ZoomOut, [](TimeAxis& a) { a.zoomAround(a.leftPx() + a.widthPx() / 2, 1 / 1.5); });
    zoom("&Reset zoom", QKeySequence("Ctrl+0"), [](TimeAxis& a) { a.reset(); });
    view->addSeparator();
    const QStringList names = viewNames();
    for (int i = 0; i < names.size(); ++i) {
        QAction* a = view->addAction(m_tabs->tabText(i));
        a->setShortcut(QKeySequence(QString("Alt+%1").arg(i + 1)));
        connect(a, &QAction::triggered, this, [this, i] { m_tabs->setCurrentIndex(i); });
    }
}

void MainWindow::replan() {
    m_planner->request(m_inputs->overrides(), m_inputs->profileArg().toStdString());
    m_wrap->setPending();
    m_status->setText("Planning...");
}

void MainWindow::onPlan(std::shared_ptr<const PlanResult> plan) {
    m_plan = plan;
    m_inputs->clearErrors();
    m_fit->setPlan(plan);
    m_memory->setPlan(plan);
    m_timeline->setPlan(plan);
    m_modules->setPlan(plan);
    m_status->setText(QString("%1: %2, step %3")
                          .arg(toQString(plan->plan.model->name), plan->eval.fit.fits ? "fits" : "does not fit",
                               formatMs(plan->eval.summary.step_s)));
}

core::Status MainWindow::openPlan(const QString& path) {
    if (auto s = m_inputs->setBasePlan(path); !s) {
        m_inputs->showError(QString::fromStdString(s.error().message));
        return s;
    }
    addRecent(QFileInfo(path).absoluteFilePath());
    setWindowTitle("shardcast - " + QFileInfo(path).fileName());
    return core::Ok{};
}

core::Status MainWindow::savePlan(const QString& path) const {
    if (!m_plan) return core::makeError("no plan to save yet");
    return core::writePlanFile(m_plan->plan, path.toStdString());
}

core::Status MainWindow::exportCurrentView(const QString& path) {
    auto* area = static_cast<QScrollArea*>(m_tabs->currentWidget());
    return saveWidgetImage(area->widget(), path);
}

core::Status MainWindow::exportChromeTrace(const QString& path) const {
    if (!m_plan) return core::makeError("no plan to export yet");
    const sim::Evaluation& e = m_plan->eval;
    return sim::writeChromeTrace(path.toStdString(), e.program, e.timeline, &e.timed);
}

void MainWindow::refreshStoredProfiles() {
#ifdef SHARDCAST_GUI_WITH_STORE
    QStringList names;
    std::error_code ec;
    auto path = db::defaultDbPath();
    if (path && std::filesystem::exists(*path, ec)) {
        if (auto store = db::Store::open(*path, false)) {
            if (auto stored = planstore::storedProfileNames(**store)) {
                for (const std::string& n : *stored) names << toQString(n);
            }
        }
    }
    m_inputs->setStoredProfiles(names);
#endif
}

#ifdef SHARDCAST_GUI_WITH_STORE
QString MainWindow::writeStoreCopy(const QString& id, const nlohmann::json& document) {
    // The loaders read files: an object opened from the store is written to the cache first.
    QDir dir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation));
    dir.mkpath("store");
    const QString path = dir.filePath("store/" + id + ".json");
    if (auto s = core::writeFileAtomically(path.toStdString(), document.dump(2) + "\n"); !s) {
        m_status->setText(QString::fromStdString(s.error().message));
        return {};
    }
    return path;
}
#endif

void MainWindow::wrapModules(const QStringList& fqns) {
    if (fqns.isEmpty()) {
        m_inputs->showError("Module tree: check at least one module to wrap");
        return;
    }
    // A modules:FILE wrap policy (one FQN per line), written where the plan can read it back.
    QDir dir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation));
    dir.mkpath("units");
    const QString path = dir.filePath(QString("units/modules-%1.txt").arg(QDateTime::currentMSecsSinceEpoch()));
    if (auto s = core::writeFileAtomically(path.toStdString(), (fqns.join('\n') + '\n').toStdString()); !s) {
        m_inputs->showError(QString::fromStdString(s.error().message));
        return;
    }
    m_inputs->setKnob("wrap", "modules:" + path);
}

core::Result<std::string> MainWindow::saveToStore() {
#ifdef SHARDCAST_GUI_WITH_STORE
    if (!m_plan) return core::makeError("no plan to save yet");
    auto path = db::defaultDbPath();
    if (!path) return path.error();
    auto store = db::Store::open(*path, true);
    if (!store) return store.error();
    // The same prediction `shardcast simulate --save` stores: plan, profile, summary, timeline, curve,
    // every micro-batch simulated (the view may show a step simulated by its period).
    const sim::Evaluation* e = &m_plan->eval;
    sim::Evaluation whole;
    if (e->period.byPeriod()) {
        sim::EvaluationOptions options;
        options.headroom = e->fit.headroom;
        options.record_curve = true;
        sim::Evaluator evaluator;
        if (auto s = evaluator.evaluate(m_plan->plan, &m_plan->profile.profile, options, whole); !s) return s.error();
        e = &whole;
    }
    auto saved = planstore::savePrediction(**store, m_plan->plan, *e, m_plan->profile, "");
    if (!saved) return core::makeError((*store)->path().string() + ": " + saved.error().message);
    if (m_history) (void)m_history->refresh();
    refreshStoredProfiles();
    return db::formatId(saved->prediction) + " (plan " + db::formatId(saved->plan) + ")";
#else
    return core::makeError("this shardcast-gui was built without the store (db/)");
#endif
}

bool MainWindow::showView(const QString& name) {
    const qsizetype i = viewNames().indexOf(name);
    if (i < 0) return false;
    m_tabs->setCurrentIndex(static_cast<int>(i));
    return true;
}

void MainWindow::addRecent(const QString& path) {
    if (!m_options.use_settings) return;
    QSettings settings("shardcast", "shardcast-gui");
    QStringList recent = settings.value("recentFiles").toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kMaxRecent) recent.removeLast();
    settings.setValue("recentFiles", recent);
    refreshRecentMenu();
}

void MainWindow::refreshRecentMenu() {
    m_recent->clear();
    QStringList recent;
    if (m_options.use_settings) recent = QSettings("shardcast", "shardcast-gui").value("recentFiles").toStringList();
    for (const QString& path : recent) {
        QAction* a = m_recent->addAction(path);
        connect(a, &QAction::triggered, this, [this, path] { (void)openPlan(path); });
    }
    m_recent->setEnabled(!recent.isEmpty());
}

void MainWindow::closeEvent(QCloseEvent* e) {
    if (m_options.use_settings) {
        QSettings settings("shardcast", "shardcast-gui");
        settings.setValue("geometry", saveGeometry());
        settings.setValue("state", saveState());
    }
    e->accept();
}

}  // namespace shardcast::gui
