#pragma once
// Predicted against measured: a run record (core::loadRunRecord) predicted the way `shardcast
// compare PLAN|run RUN.json` does (the run's own plan on the run's own hardware profile), the
// two timelines' lanes aligned stream by stream, measured tasks coloured by their duration error,
// and the summary errors (core::compareStep).
#include <memory>
#include <optional>
#include <vector>

#include <QString>
#include <QWidget>

#include "core/compare.hpp"
#include "core/plan.hpp"
#include "core/result.hpp"
#include "core/run_record.hpp"
#include "simulator/evaluation.hpp"
#include "gui/timeline_canvas.hpp"

class QLabel;

namespace shardcast::gui {

struct CompareData {
    QString path;
    core::RunRecord run;
    core::Plan plan;
    sim::Evaluation prediction;
    core::Comparison comparison;
    std::vector<std::optional<double>> task_error;  // per task id: (predicted - measured) / measured
};

// The whole compare computation, without widgets. Errors name the file and the field.
core::Result<std::shared_ptr<CompareData>> predictRun(const QString& run_path);

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    core::Status loadRun(const QString& path);
    const CompareData* data() const { return m_data.get(); }
    TimelineCanvas* canvas() const { return m_canvas; }
    QString summaryText() const;

private:
    QLabel* m_summary = nullptr;
    QLabel* m_tasks = nullptr;
    QLabel* m_error = nullptr;
    TimelineCanvas* m_canvas = nullptr;
    std::shared_ptr<const CompareData> m_data;
};

}  // namespace shardcast::gui
