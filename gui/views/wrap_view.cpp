#include "gui/views/wrap_view.hpp"

#include <algorithm>
#include <cmath>

#include <QApplication>
#include <QClipboard>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QToolTip>
#include <QVBoxLayout>

#include "gui/views/wrap_table_model.hpp"
#include "gui/widgets/palette.hpp"
#include "gui/widgets/plot_axes.hpp"

namespace shardcast::gui {

namespace {
QString numLabel(double v) { return QString::number(v, 'g', 4); }
QColor strategyColor(core::Strategy s) {
    switch (s) {
        case core::Strategy::NoShard: return QColor(0x79, 0x70, 0x6e);
        case core::Strategy::ShardGradOp: return QColor(0xf2, 0x8e, 0x2b);
        case core::Strategy::FullShard: return QColor(0x4e, 0x79, 0xa7);
        case core::Strategy::HybridShard: return QColor(0x59, 0xa1, 0x4f);
        case core::Strategy::HybridShardZero2: return QColor(0xb0, 0x7a, 0xa1);
    }
    return Qt::gray;
}
}  // namespace

WrapScatter::WrapScatter(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setMinimumSize(360, 280);
}

QRectF WrapScatter::plotRect() const { return QRectF(70, 16, width() - 70 - 16, height() - 16 - 70); }

void WrapScatter::setResult(std::shared_ptr<const WrapResult> result) {
    m_result = std::move(result);
    m_selected = -1;
    m_x_max = 1;
    m_y_max = m_result ? toGiB(m_result->capacity_bytes) : 1;
    if (m_result) {
        for (const sim::SweepResult& r : m_result->sweep) {
            if (!r.ok) continue;
            m_x_max = std::max(m_x_max, r.step_s * 1e3);
            m_y_max = std::max(m_y_max, toGiB(r.peak_bytes));
        }
    }
    m_x_max *= 1.05;
    m_y_max *= 1.05;
    update();
}

void WrapScatter::setSelected(int candidate) {
    m_selected = candidate;
    update();
}

QPointF WrapScatter::pointOf(int candidate) const {
    const QRectF plot = plotRect();
    const sim::SweepResult& r = m_result->sweep[static_cast<size_t>(candidate)];
    const LinearScale x{0, m_x_max, plot.left(), plot.right()};
    const LinearScale y{0, m_y_max, plot.bottom(), plot.top()};
    return {x.toPixel(r.step_s * 1e3), y.toPixel(toGiB(r.peak_bytes))};
}

int WrapScatter::candidateAt(QPointF pos) const {
    if (!m_result) return -1;
    int best = -1;
    double best_d = 8.0;
    for (int i = 0; i < static_cast<int>(m_result->sweep.size()); ++i) {
        if (!m_result->sweep[static_cast<size_t>(i)].ok) continue;
        const QPointF d = pointOf(i) - pos;
        const double dist = std::hypot(d.x(), d.y());
        if (dist <= best_d) {
            best_d = dist;
            best = i;
        }
    }
    return best;
}

void WrapScatter::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    const QRectF plot = plotRect();
    if (!m_result) {
        p.drawText(rect(), Qt::AlignCenter, "Sweeping every wrap policy x strategy x AC...");
        return;
    }
    const LinearScale x{0, m_x_max, plot.left(), plot.right()};
    const LinearScale y{0, m_y_max, plot.bottom(), plot.top()};
    drawAxes(p, plot, x, y, "step time (ms)", "peak memory per GPU (GiB)", numLabel, numLabel);
    p.setRenderHint(QPainter::Antialiasing);
    const double cap = y.toPixel(toGiB(m_result->capacity_bytes));
    p.setPen(QPen(QColor(0xc0, 0x39, 0x2b), 2));
    p.drawLine(QPointF(plot.left(), cap), QPointF(plot.right(), cap));
    p.drawText(QPointF(plot.left() + 4, cap - 4), "capacity " + formatGiB(m_result->capacity_bytes));
    QPolygonF front;
    for (size_t i : m_result->front) front << pointOf(static_cast<int>(i));
    p.setPen(QPen(Qt::black, 1.5, Qt::DashLine));
    p.drawPolyline(front);
    for (int i = 0; i < static_cast<int>(m_result->sweep.size()); ++i) {
        const sim::SweepResult& r = m_result->sweep[static_cast<size_t>(i)];
        if (!r.ok) continue;
        const QPointF pt = pointOf(i);
        const QColor c = strategyColor(r.candidate.strategy);
        p.setPen(QPen(c.darker(130), 1));
        p.setBrush(r.candidate.ac.mode == core::Checkpointing::None ? QBrush(c) : QBrush(Qt::white));
        if (r.candidate.ac.mode == core::Checkpointing::None) {
            p.drawEllipse(pt, 4, 4);
        } else {
            p.drawRect(QRectF(pt.x() - 4, pt.y() - 4, 8, 8));
        }
    }
    if (m_selected >= 0 && m_selected < static_cast<int>(m_result->sweep.size())) {
        p.setPen(QPen(Qt::black, 2));
        p.setBrush(Qt::NoBrush);
        p.drawEllipse(pointOf(m_selected), 8, 8);
    }
    // Legend under the axis title.
    double lx = plot.left();
    const double ly = plot.bottom() + 46;
    p.setPen(Qt::black);
    for (core::Strategy s : {core::Strategy::NoShard, core::Strategy::ShardGradOp, core::Strategy::FullShard,
                             core::Strategy::HybridShard, core::Strategy::HybridShardZero2}) {
        p.setBrush(strategyColor(s));
        p.drawEllipse(QPointF(lx + 5, ly), 4, 4);
        const QString name = toQString(core::strategyName(s));
        p.drawText(QPointF(lx + 12, ly + 4), name);
        lx += 22 + QFontMetrics(p.font()).horizontalAdvance(name);
    }
    p.setBrush(Qt::white);
    p.drawRect(QRectF(lx + 1, ly - 4, 8, 8));
    p.drawText(QPointF(lx + 12, ly + 4), "AC full (filled: none); dashed: Pareto front");
}

void WrapScatter::mousePressEvent(QMouseEvent* e) {
    const int i = candidateAt(e->position());
    if (i >= 0) emit candidateClicked(i);
}

void WrapScatter::mouseMoveEvent(QMouseEvent* e) {
    const int i = candidateAt(e->position());
    if (i < 0) {
        QToolTip::hideText();
        return;
    }
    const sim::SweepResult& r = m_result->sweep[static_cast<size_t>(i)];
    QToolTip::showText(e->globalPosition().toPoint(),
                       QString("<b>%1</b><br>step %2, peak %3, MFU %4<br><i>click to load this plan</i>")
                           .arg(QString::fromStdString(sim::candidateLabel(r.candidate)).toHtmlEscaped(),
                                formatMs(r.step_s), formatGiB(r.peak_bytes))
                           .arg(r.mfu, 0, 'f', 3),
                       this);
}

GroupingStrip::GroupingStrip(QWidget* parent) : QWidget(parent) { setFixedHeight(34); }

void GroupingStrip::setGrouping(int blocks, std::vector<int32_t> ends) {
    m_blocks = blocks;
    m_ends = std::move(ends);
    update();
}

void GroupingStrip::paintEvent(QPaintEvent*) {
    QPainter p(this);
    if (m_blocks <= 0 || m_ends.empty()) return;
    const double left = 50, w = (width() - left - 4) / static_cast<double>(m_blocks);
    p.drawText(QRectF(0, 0, left - 6, height()), Qt::AlignRight | Qt::AlignVCenter, "units");
    int32_t begin = 0;
    for (size_t u = 0; u < m_ends.size(); ++u) {
        const int32_t end = m_ends[u];
        const QRectF r(left + begin * w, 4, (end - begin) * w, height() - 8);
        p.fillRect(r, u % 2 == 0 ? QColor(0x4e, 0x79, 0xa7) : QColor(0xa0, 0xcb, 0xe8));
        p.setPen(Qt::white);
        p.drawRect(r);
        p.setPen(u % 2 == 0 ? Qt::white : Qt::black);
        const QString label = end - begin == 1 ? QString::number(begin) : QString("%1-%2").arg(begin).arg(end - 1);
        if (QFontMetrics(p.font()).horizontalAdvance(label) < r.width() - 2) p.drawText(r, Qt::AlignCenter, label);
        begin = end;
    }
}

WrapView::WrapView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    m_status = new QLabel;
    layout->addWidget(m_status);
    auto* top = new QSplitter(Qt::Horizontal);
    m_scatter = new WrapScatter;
    m_model = new WrapTableModel(this);
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(WrapTableModel::kSortRole);
    m_table = sortableTable(m_proxy, WrapTableModel::Step, Qt::AscendingOrder);
    top->addWidget(m_scatter);
    top->addWidget(m_table);
    top->setStretchFactor(0, 3);
    top->setStretchFactor(1, 4);
    layout->addWidget(top, 3);

    auto* bottom = new QWidget;
    auto* bl = new QVBoxLayout(bottom);
    bl->setContentsMargins(0, 0, 0, 0);
    auto* opt_row = new QHBoxLayout;
    m_optimize = new QLabel("<b>Optimize</b>: the fastest configuration of this job over the whole space.");
    m_optimize->setWordWrap(true);
    m_optimize->setTextInteractionFlags(Qt::TextSelectableByMouse);
    opt_row->addWidget(m_optimize, 1);
    m_optimize_button = new QPushButton("Optimize the job");
    m_optimize_button->setToolTip("Run `shardcast optimize` on these inputs: every strategy, mesh, wrap policy, AC mode, "
                                  "micro-batch x accumulation split of the same global batch, reshard, prefetch and "
                                  "offload, exact under the simulator.");
    opt_row->addWidget(m_optimize_button);
    m_load_winner = new QPushButton("Load the winner");
    m_load_winner->setToolTip("Load the optimizer's best configuration into the knobs.");
    m_load_winner->setEnabled(false);
    opt_row->addWidget(m_load_winner);
    bl->addLayout(opt_row);
    connect(m_optimize_button, &QPushButton::clicked, this, &WrapView::optimizeRequested);
    connect(m_load_winner, &QPushButton::clicked, this, &WrapView::loadWinnerRequested);
    auto* row = new QHBoxLayout;
    m_search = new QLabel;
    m_search->setWordWrap(true);
    m_search->setTextInteractionFlags(Qt::TextSelectableByMouse);
    row->addWidget(m_search, 1);
    auto* copy = new QPushButton("Copy PyTorch code");
    copy->setToolTip("Copy the fully_shard code of the exact search's grouping to the clipboard.");
    row->addWidget(copy);
    bl->addLayout(row);
    m_strip = new GroupingStrip;
    bl->addWidget(m_strip);
    m_code = new QPlainTextEdit;
    m_code->setReadOnly(true);
    m_code->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    bl->addWidget(m_code, 1);
    layout->addWidget(bottom, 2);

    connect(copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(pytorchCode()); });
    connect(m_scatter, &WrapScatter::candidateClicked, this, &WrapView::choose);
    connect(m_table, &QTableView::clicked, this, [this](const QModelIndex& index) {
        choose(m_proxy->data(index, WrapTableModel::kCandidateRole).toInt());
    });
    setPending();
}

void WrapView::setPending() { m_status->setText("Sweeping every wrap policy x strategy x AC (none, full)..."); }

void WrapView::choose(int candidate) {
    if (!m_result || candidate < 0 || candidate >= static_cast<int>(m_result->sweep.size())) return;
    m_scatter->setSelected(candidate);
    emit candidateChosen(m_result->sweep[static_cast<size_t>(candidate)].candidate);
}

void WrapView::setResult(std::shared_ptr<const WrapResult> result) {
    m_result = std::move(result);
    m_scatter->setResult(m_result);
    m_model->setResult(m_result);
    int ok = 0, fits = 0;
    for (const sim::SweepResult& r : m_result->sweep) {
        ok += r.ok ? 1 : 0;
        fits += r.ok && r.fits ? 1 : 0;
    }
    QString status = QString("%1 candidates (%2 valid, %3 fit), %4 on the Pareto front")
                         .arg(m_result->sweep.size())
                         .arg(ok)
                         .arg(fits)
                         .arg(m_result->front.size());
    if (m_result->recommended >= 0) {
        status += "; fastest that fits: " +
                  QString::fromStdString(sim::candidateLabel(m_result->sweep[static_cast<size_t>(m_result->recommended)].candidate));
    }
    m_status->setText(status + ". Click a point or a row to load that plan.");
    if (m_result->search_ok) {
        const sim::WrapSearchResult& s = m_result->search;
        const QString reserved = s.full.reserved_bytes > 0 ? ", reserved " + formatGiB(s.full.reserved_bytes) : QString();
        m_search->setText(QString("<b>Exact search</b> (contiguous groupings of blocks into units): %1 -> %2 block units; "
                                  "step %3, peak %4%5 (%6)%7")
                              .arg(QString::fromStdString(sim::groupingString(s.ends)).toHtmlEscaped())
                              .arg(s.units)
                              .arg(formatMs(s.full.step_s), formatGiB(s.full.peak_bytes), reserved,
                                   s.fits ? QString("fits") : QString("does not fit"),
                                   s.message.empty() ? QString() : "<br>" + QString::fromStdString(s.message).toHtmlEscaped()));
        m_code->setPlainText(QString::fromStdString(m_result->pytorch_code));
        m_strip->setGrouping(static_cast<int>(m_result->base.model->blocks.size()), s.ends);
    } else {
        m_search->setText("<b>Exact search</b>: " + QString::fromStdString(m_result->search_error).toHtmlEscaped());
        m_code->clear();
        m_strip->setGrouping(0, {});
    }
}

QString WrapView::pytorchCode() const { return m_code->toPlainText(); }

void WrapView::setOptimizeRunning() {
    m_optimize->setText("<b>Optimize</b>: searching the whole space...");
    m_optimize_button->setEnabled(false);
    m_load_winner->setEnabled(false);
}

void WrapView::setOptimizeError(const QString& message) {
    m_optimize->setText("<b>Optimize</b>: " + message.toHtmlEscaped());
    m_optimize_button->setEnabled(true);
    m_load_winner->setEnabled(false);
}

void WrapView::setOptimizeResult(std::shared_ptr<const OptimizeRun> run) {
    const sim::OptimizeResult& r = run->result;
    const sim::OptimizeEntry& b = r.best;
    QString text = QString("<b>Optimize</b> (global batch %1 sequences; %2 configurations, %3 evaluated, %4 pruned by "
                           "proven bounds): ")
                       .arg(run->global_batch)
                       .arg(r.space_size)
                       .arg(r.evaluated)
                       .arg(r.pruned);
    const QString choice = QString::fromStdString(describeChoice(b.choice)).toHtmlEscaped();
    if (r.fits) {
        text += QString("best %1 &rarr; %2 tokens/s per GPU, step %3, peak %4 of budget %5.")
                    .arg(choice)
                    .arg(b.tokens_per_s_per_gpu, 0, 'f', 0)
                    .arg(formatMs(b.step_s), formatGiB(b.peak_bytes), formatGiB(b.budget_bytes));
        if (!r.at_risk.empty()) {
            const sim::OptimizeEntry& f = r.at_risk.front();
            text += QString("<br>%1 faster configuration(s) AT RISK on reserved memory (the allocated peak fits, reserved "
                            "does not), the fastest: %2, step %3, allocated %4, reserved %5%6.")
                        .arg(r.at_risk.size())
                        .arg(QString::fromStdString(describeChoice(f.choice)).toHtmlEscaped(), formatMs(f.step_s),
                             formatGiB(f.allocated_bytes), f.peak_is_bound ? QString("at least ") : QString(),
                             formatGiB(f.peak_bytes));
        }
        int shown = 0;
        for (const sim::DimensionLoss& l : r.losses) {
            if (!l.fits || shown == 3) continue;
            text += QString("<br>%1 %2 instead of %3: %4%").arg(QString::fromStdString(std::string(sim::dimensionName(l.dimension))),
                                                              QString::fromStdString(l.value).toHtmlEscaped(),
                                                              QString::fromStdString(l.winner_value).toHtmlEscaped())
                        .arg(l.change * 100, 0, 'f', 1);
            ++shown;
        }
    } else {
        text += "nothing fits. " + QString::fromStdString(r.no_fit).toHtmlEscaped();
    }
    m_optimize->setText(text);
    m_optimize_button->setEnabled(true);
    m_load_winner->setEnabled(r.fits);
}

QString WrapView::optimizeText() const { return m_optimize->text(); }

}  // namespace shardcast::gui
