#pragma once
// The main window: the input dock on the left, the views in tabs on the right, the planner
// between them, File menu actions and remembered settings (QSettings, organisation "shardcast").
#include <memory>

#include <QMainWindow>
#include <QString>
#include <QStringList>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "gui/state/plan_results.hpp"

class QLabel;
class QThread;
class QMenu;
class QTabWidget;

namespace shardcast::gui {

class CompareView;
class HistoryView;
class FitView;
class InputPanel;
class MemoryView;
class ModuleTree;
class Planner;
class TimelineView;
class WrapView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    struct Options {
        bool use_settings = true;  // restore and save geometry, dock state and recent files
    };
    explicit MainWindow(Options options);
    MainWindow() : MainWindow(Options{}) {}
    ~MainWindow() override;

    // Loads a plan file as the knobs' base and re-plans. Errors: the file's (the previous plan stays).
    core::Status openPlan(const QString& path);
    core::Status savePlan(const QString& path) const;
    core::Status exportCurrentView(const QString& path);
    core::Status exportChromeTrace(const QString& path) const;

    // "fit", "memory", "timeline", "wrap", "compare", and "history" when built with the store;
    // false for an unknown name.
    bool showView(const QString& name);
    static QStringList viewNames();

    Planner* planner() const { return m_planner; }
    InputPanel* inputs() const { return m_inputs; }
    FitView* fitView() const { return m_fit; }
    MemoryView* memoryView() const { return m_memory; }
    TimelineView* timelineView() const { return m_timeline; }
    WrapView* wrapView() const { return m_wrap; }
    CompareView* compareView() const { return m_compare; }
    ModuleTree* moduleTree() const { return m_modules; }
    HistoryView* historyView() const { return m_history; }
    // Saves the current plan's prediction (with its plan and profile) in the store
    // (db::defaultDbPath()), as `simulate --save` does; returns "pred-4 (plan plan-3)".
    core::Result<std::string> saveToStore();
    const PlanResult* currentPlan() const { return m_plan.get(); }

    // `shardcast optimize` on the current inputs, on a worker thread (a second start cancels the
    // first); the wrap view shows the result. waitForOptimize runs the event loop until it is in
    // (false on timeout); loadOptimizeWinner loads the winner into the knobs (as a plan file).
    void startOptimize();
    bool waitForOptimize(int timeout_ms);
    const OptimizeRun* optimizeRun() const { return m_optimize_run.get(); }
    core::Status loadOptimizeWinner();

    // The bundled first-screen plan (examples/llama-3.1-8b-8xh100.json), installed or in the sources.
    static QString defaultPlanPath();

protected:
    void closeEvent(QCloseEvent* e) override;

private:
    void buildMenus();
    void replan();
    // The profile knob's list: the profiles in the store (db::defaultDbPath()).
    void refreshStoredProfiles();
    void onPlan(std::shared_ptr<const PlanResult> plan);
    void addRecent(const QString& path);
    void refreshRecentMenu();
    void wrapModules(const QStringList& fqns);  // sets the wrap knob to modules:FILE of these
#ifdef SHARDCAST_GUI_WITH_STORE
    QString writeStoreCopy(const QString& id, const nlohmann::json& document);  // "" on error, shown
#endif

    Options m_options;
    Planner* m_planner = nullptr;
    InputPanel* m_inputs = nullptr;
    QTabWidget* m_tabs = nullptr;
    FitView* m_fit = nullptr;
    MemoryView* m_memory = nullptr;
    TimelineView* m_timeline = nullptr;
    WrapView* m_wrap = nullptr;
    CompareView* m_compare = nullptr;
    ModuleTree* m_modules = nullptr;
    HistoryView* m_history = nullptr;  // null without the store
    QLabel* m_status = nullptr;
    QMenu* m_recent = nullptr;
    std::shared_ptr<const PlanResult> m_plan;
    QThread* m_optimizer = nullptr;                   // the running optimizer, if any
    std::shared_ptr<sim::CancelToken> m_optimize_cancel;
    std::shared_ptr<const OptimizeRun> m_optimize_run;  // the last result
};

}  // namespace shardcast::gui
