#include "gui/views/fit_view.hpp"

#include <algorithm>

#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>

#include "gui/widgets/palette.hpp"
#include "gui/widgets/plot_axes.hpp"

namespace shardcast::gui {

namespace {
QString gibLabel(double v) { return QString::number(v, 'f', 0); }
}  // namespace

StrategyBars::StrategyBars(QWidget* parent) : QWidget(parent) {
    setMinimumHeight(260);
    setMouseTracking(true);
}

void StrategyBars::setComparison(std::shared_ptr<const StrategyComparison> c, core::Strategy current) {
    m_data = std::move(c);
    m_current = current;
    update();
}

QRectF StrategyBars::plotRect() const { return QRectF(80, 20, width() - 80 - 190, height() - 20 - 60); }

QRectF StrategyBars::barRect(int index) const {
    if (!m_data || index < 0 || index >= static_cast<int>(m_data->strategies.size())) return {};
    const QRectF plot = plotRect();
    const double slot = plot.width() / static_cast<double>(m_data->strategies.size());
    return QRectF(plot.left() + slot * index + slot * 0.2, plot.top(), slot * 0.6, plot.height());
}

int StrategyBars::barAt(QPointF pos) const {
    if (!m_data) return -1;
    for (int i = 0; i < static_cast<int>(m_data->strategies.size()); ++i) {
        if (barRect(i).contains(pos)) return i;
    }
    return -1;
}

void StrategyBars::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    p.setRenderHint(QPainter::Antialiasing);
    if (!m_data) {
        p.drawText(rect(), Qt::AlignCenter, "Evaluating the five strategies...");
        return;
    }
    const QRectF plot = plotRect();
    int64_t top = m_data->capacity_bytes;
    for (const StrategyFit& s : m_data->strategies) top = std::max(top, s.peak_bytes);
    LinearScale y{0, toGiB(top) * 1.08, plot.bottom(), plot.top()};
    drawAxes(p, plot, LinearScale{}, y, {}, "peak memory per GPU (GiB)", nullptr, gibLabel);
    const QFontMetrics fm(p.font());
    for (int i = 0; i < static_cast<int>(m_data->strategies.size()); ++i) {
        const StrategyFit& s = m_data->strategies[static_cast<size_t>(i)];
        const QRectF col = barRect(i);
        const QString name = toQString(core::strategyName(s.strategy));
        QFont f = p.font();
        f.setBold(s.strategy == m_current);
        p.setFont(f);
        p.setPen(Qt::black);
        p.drawText(QRectF(col.center().x() - 80, plot.bottom() + 6, 160, fm.height()), Qt::AlignCenter, name);
        if (!s.ok) {
            p.setPen(Qt::darkGray);
            p.drawText(QRectF(col.left() - 20, plot.bottom() - 40, col.width() + 40, 36), Qt::AlignCenter | Qt::TextWordWrap,
                       "not valid here");
            continue;
        }
        double base = 0;
        for (int c = 0; c < core::kMemCategoryCount; ++c) {
            const double v = toGiB(s.at_peak[static_cast<size_t>(c)]);
            if (v <= 0) continue;
            const QRectF seg(QPointF(col.left(), y.toPixel(base + v)), QPointF(col.right(), y.toPixel(base)));
            p.fillRect(seg, categoryColor(static_cast<core::MemCategory>(c)));
            base += v;
        }
        p.setPen(QPen(s.strategy == m_current ? Qt::black : Qt::gray, s.strategy == m_current ? 2 : 1));
        p.drawRect(QRectF(QPointF(col.left(), y.toPixel(base)), QPointF(col.right(), plot.bottom())));
        p.setPen(s.fits ? QColor(0x1e, 0x84, 0x49) : QColor(0xc0, 0x39, 0x2b));
        p.drawText(QRectF(col.center().x() - 80, y.toPixel(base) - fm.height() - 2, 160, fm.height()), Qt::AlignCenter,
                   QString("%1 GiB, %2").arg(toGiB(s.peak_bytes), 0, 'f', 1).arg(formatMs(s.step_s)));
        f.setBold(false);
        p.setFont(f);
    }
    const double cap = y.toPixel(toGiB(m_data->capacity_bytes));
    const double budget = y.toPixel(toGiB(m_data->budget_bytes));
    p.setPen(QPen(QColor(0xc0, 0x39, 0x2b), 2));
    p.drawLine(QPointF(plot.left(), cap), QPointF(plot.right(), cap));
    p.drawText(QPointF(plot.right() - 170, cap - 4), "capacity " + formatGiB(m_data->capacity_bytes));
    p.setPen(QPen(QColor(0xc0, 0x39, 0x2b), 1, Qt::DashLine));
    p.drawLine(QPointF(plot.left(), budget), QPointF(plot.right(), budget));
    p.drawText(QPointF(plot.left() + 4, budget + fm.height()), "budget (headroom kept) " + formatGiB(m_data->budget_bytes));

    // Legend: categories that appear in any bar.
    double ly = plot.top();
    p.setPen(Qt::black);
    for (int c = core::kMemCategoryCount - 1; c >= 0; --c) {
        bool used = false;
        for (const StrategyFit& s : m_data->strategies) used = used || s.at_peak[static_cast<size_t>(c)] > 0;
        if (!used) continue;
        p.fillRect(QRectF(plot.right() + 16, ly + 2, 12, 12), categoryColor(static_cast<core::MemCategory>(c)));
        p.drawText(QPointF(plot.right() + 34, ly + 12), toQString(core::categoryName(static_cast<core::MemCategory>(c))));
        ly += 18;
    }
}

void StrategyBars::mousePressEvent(QMouseEvent* e) {
    const int i = barAt(e->position());
    if (i >= 0 && m_data->strategies[static_cast<size_t>(i)].ok) emit strategyClicked(m_data->strategies[static_cast<size_t>(i)].strategy);
}

void StrategyBars::mouseMoveEvent(QMouseEvent* e) {
    const int i = barAt(e->position());
    if (i < 0) {
        QToolTip::hideText();
        return;
    }
    const StrategyFit& s = m_data->strategies[static_cast<size_t>(i)];
    QString text = "<b>" + toQString(core::strategyName(s.strategy)) + "</b>";
    if (!s.ok) {
        text += "<br>" + QString::fromStdString(s.error).toHtmlEscaped();
    } else {
        text += QString("<br>peak %1, step %2").arg(formatGiB(s.peak_bytes), formatMs(s.step_s));
        for (int c = core::kMemCategoryCount - 1; c >= 0; --c) {
            if (s.at_peak[static_cast<size_t>(c)] <= 0) continue;
            text += "<br>" + toQString(core::categoryName(static_cast<core::MemCategory>(c))) + ": " +
                    formatGiB(s.at_peak[static_cast<size_t>(c)]);
        }
        text += "<br><i>click to use this strategy</i>";
    }
    QToolTip::showText(e->globalPosition().toPoint(), text, this);
}

FitView::FitView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    m_headline = new QLabel("Evaluating...");
    QFont f = m_headline->font();
    f.setPointSizeF(f.pointSizeF() * 1.6);
    f.setBold(true);
    m_headline->setFont(f);
    m_headline->setObjectName("fit-headline");
    m_headline->setWordWrap(true);
    m_details = new QLabel;
    m_details->setWordWrap(true);
    m_details->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_bars = new StrategyBars;
    layout->addWidget(m_headline);
    layout->addWidget(m_details);
    layout->addWidget(m_bars, 1);
    connect(m_bars, &StrategyBars::strategyClicked, this, &FitView::strategyClicked);
}


namespace {

// " x pp P (schedule; memory and timeline of stage S ...)": the pipeline stage (or, under
// Interleaved1F1B, the pipeline rank) the view shows.
QString pipelineText(const core::Plan& p, const sim::Evaluation& e) {
    if (e.stages.empty()) return {};
    const sim::StageFigures& f = e.stages[static_cast<size_t>(e.stage)];
    const bool interleaved = e.mesh.virtual_stages > 1;
    return QString(" x pp %1 (%2%3; memory and timeline of %4 %5, whose memory binds: %6 blocks, %7 %8 held)")
        .arg(e.mesh.pp)
        .arg(toQString(core::ppScheduleName(p.sharding.pp_schedule)))
        .arg(interleaved ? QString(", %1 stages per rank").arg(e.mesh.virtual_stages) : QString())
        .arg(interleaved ? "pipeline rank" : "stage")
        .arg(e.stage)
        .arg(f.blocks)
        .arg(f.micro_batches_held)
        .arg(interleaved ? "(stage, micro-batch) pairs" : "micro-batches");
}

// What the step's neighbours need (simulator/lifecycle.hpp, simulator/checkpoint.hpp): a line each
// for the init on the GPU, an eval step and a checkpoint save, OUT OF MEMORY in red where it is.
QString aroundTheStepText(const core::Plan& p, const sim::Evaluation& e) {
    auto verdict = [](bool fits) { return fits ? QString("fits") : QString("<b style='color:#c0392b'>OUT OF MEMORY</b>"); };
    QString out;
    if (e.lifecycle) {
        const sim::LifecycleFigures& f = *e.lifecycle;
        out += QString("<br>init: %1 on the meta device (%2); %3 materialised on the GPU before fully_shard (%4)")
                   .arg(formatGiB(f.init_meta_bytes), verdict(f.init_meta_fits), formatGiB(f.init_materialized_bytes),
                        verdict(f.init_materialized_fits));
        if (f.eval_modelled) {
            out += QString("<br>eval step: %1 (%2), %3").arg(formatGiB(f.eval_peak_bytes), verdict(f.eval_fits), formatMs(static_cast<double>(f.eval_ns) * 1e-9));
        }
        out += QString("<br>summon_full_params: %1 (%2); with offload_to_cpu %3 (%4)")
                   .arg(formatGiB(f.summon_bytes), verdict(f.summon_fits), formatGiB(f.summon_offload_bytes),
                        verdict(f.summon_offload_fits));
    }
    if (e.checkpoint) {
        const sim::CheckpointFigures& c = *e.checkpoint;
        out += QString("<br>checkpoint (%1 every %2 steps): rank 0 %3 (%4), save %5 s, goodput %6% (best every %7 steps: %8%)")
                   .arg(toQString(core::checkpointModeName(c.mode)))
                   .arg(c.every_steps)
                   .arg(formatGiB(c.rank0_peak_bytes), verdict(c.rank0_fits))
                   .arg(c.save_s, 0, 'f', 1)
                   .arg(100 * c.goodput, 0, 'f', 2)
                   .arg(c.best_every_steps)
                   .arg(100 * c.best_goodput, 0, 'f', 2);
    }
    (void)p;
    return out;
}

}  // namespace

void FitView::setPlan(std::shared_ptr<const PlanResult> plan) {
    m_plan = std::move(plan);
    const sim::Evaluation& e = m_plan->eval;
    const core::StepSummary& s = e.summary;
    const core::Plan& p = m_plan->plan;
    // Fit is judged on reserved memory where the caching allocator is modelled (core::FitVerdict).
    const QString verdict = e.fit.fits ? "Fits" : (e.fit.at_risk ? "At risk" : "Does not fit");
    const QString reserved = e.fit.reserved_bytes > 0 ? ", reserved " + formatGiB(e.fit.reserved_bytes) : QString();
    m_headline->setText(QString("%1: peak %2%3 of %4 (budget %5)  |  step %6  |  MFU %7  |  %8 tokens/s per GPU")
                            .arg(verdict, formatGiB(e.fit.peak_bytes), reserved, formatGiB(e.fit.capacity_bytes),
                                 formatGiB(e.fit.budget_bytes), formatMs(s.step_s))
                            .arg(s.mfu, 0, 'f', 3)
                            .arg(s.tokens_per_s_per_gpu, 0, 'f', 0));
    m_headline->setStyleSheet(e.fit.fits ? "color: #1e8449;" : "color: #c0392b;");
    m_details->setText(
        QString("%1 on %2 x %3 (%4 node(s) x %5), %6 (FSDP%7), shard %8 x replicate %9%15, wrap %10 -> %11 units; "
                "compute stream busy %12, exposed communication %13; peak at %14")
            .arg(toQString(p.model->name))
            .arg(e.mesh.world_size)
            .arg(toQString(e.profile.gpu.name))
            .arg(p.cluster.nodes)
            .arg(p.cluster.gpus_per_node)
            .arg(toQString(core::strategyName(p.sharding.strategy)))
            .arg(p.sharding.fsdp_version)
            .arg(e.mesh.shard_size)
            .arg(e.mesh.replicate_size)
            .arg(toQString(core::wrapPolicyString(p.sharding.wrap)))
            .arg(e.program.units.size())
            .arg(formatMs(s.compute_s), formatMs(s.exposed_comm_s),
                 e.memory.peak_task >= 0 ? QString::fromStdString(e.program.taskLabel(e.memory.peak_task)) : "start")
            .arg((e.mesh.tp > 1 ? QString(" x tp %1 (%2 of it on tensor-parallel collectives)")
                                      .arg(e.mesh.tp)
                                      .arg(formatMs(e.tp_comm_s))
                                : QString()) +
                 pipelineText(p, e)) +
        aroundTheStepText(p, e));
}

void FitView::setStrategies(std::shared_ptr<const StrategyComparison> c) {
    m_bars->setComparison(std::move(c), m_plan ? m_plan->plan.sharding.strategy : core::Strategy::FullShard);
}

QString FitView::headlineText() const { return m_headline->text(); }

}  // namespace shardcast::gui
