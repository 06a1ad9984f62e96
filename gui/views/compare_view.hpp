#pragma once
// Predicted against measured: a run record (core::loadRunRecord) predicted the way `shardcast
// compare PLAN|run RUN.json` does (the run's own plan on the run's own hardware profile), the
// two timelines' lanes aligned stream by stream, measured tasks coloured by their duration error,
// and the summary errors (core::compareStep); the per-unit diagnosis (measured/diagnosis.hpp) with
// its findings listed and their tasks marked on the measured lanes; and the two memory curves
// overlaid (gui/widgets/memory_overlay.hpp). A real PyTorch run comes in as
// its torch.profiler traces (the button, or files dropped on the view), imported as `shardcast
// import-trace` does (planstore/trace_run.hpp).
#include <memory>
#include <optional>
#include <vector>

#include <QString>
#include <QWidget>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/results/compare.hpp"
#include "core/results/run_record.hpp"
#include "gui/widgets/memory_overlay.hpp"
#include "gui/widgets/timeline_canvas.hpp"
#include "measured/diagnosis.hpp"
#include "simulator/evaluation.hpp"

class QLabel;
class QDragEnterEvent;
class QDropEvent;

namespace shardcast::gui {

struct CompareData {
    QString path;
    core::RunRecord run;
    core::Plan plan;
    sim::Evaluation prediction;
    core::Comparison comparison;
    std::vector<std::optional<double>> task_error;  // per task id: (predicted - measured) / measured
    sim::Diagnosis diagnosis;
    std::vector<uint8_t> flagged;  // per task id: 1 for the all-gathers of a unit a finding names
    core::MemoryCurves memory;     // predicted and measured memory over the step, comparable
};

// The whole compare computation, without widgets. Errors name the file and the field.
core::Result<std::shared_ptr<CompareData>> predictRun(const QString& run_path);

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    core::Status loadRun(const QString& path);
    // Imports torch.profiler traces (files or directories) of a run of `plan_path` (empty: the
    // plan.json beside the first trace), writes the run record to the cache and shows it.
    core::Status loadTraces(const QStringList& traces, const QString& plan_path = {});
    const CompareData* data() const { return m_data.get(); }
    TimelineCanvas* canvas() const { return m_canvas; }
    MemoryOverlay* memoryOverlay() const { return m_memory; }
    QString summaryText() const;

signals:
    // A run imported from traces, its record written at `record_path` (the main window stores it).
    void runImported(const QString& record_path);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    QLabel* m_findings = nullptr;
    QLabel* m_summary = nullptr;
    QLabel* m_tasks = nullptr;
    QLabel* m_error = nullptr;
    TimelineCanvas* m_canvas = nullptr;
    MemoryOverlay* m_memory = nullptr;
    std::shared_ptr<const CompareData> m_data;
};

}  // namespace shardcast::gui
