#include "gui/app/module_tree.hpp"

#include <algorithm>
#include <map>
#include <string>

#include <QHeaderView>

namespace shardcast::gui {

ModuleTree::ModuleTree(QWidget* parent) : QTreeWidget(parent) {
    setColumnCount(ColumnCount);
    setHeaderLabels({"module", "params", "FSDP unit", "search unit"});
    header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    setUniformRowHeights(true);
    setToolTip("The model's modules (named_modules()), parameters per subtree, the FSDP unit each belongs to, and "
               "the unit the exact wrap search groups it into (shaded per unit).");
}

// The unit names of a modules policy by module FQN ("a+b" is one unit of modules a and b).
namespace {
std::map<std::string, std::string> unitsByModule(const std::vector<std::string>& units) {
    std::map<std::string, std::string> out;
    for (const std::string& unit : units) {
        size_t from = 0;
        while (from <= unit.size()) {
            const size_t plus = unit.find('+', from);
            out[unit.substr(from, plus == std::string::npos ? std::string::npos : plus - from)] = unit;
            if (plus == std::string::npos) break;
            from = plus + 1;
        }
    }
    return out;
}

// "layers.4 .. layers.7 (4 modules)" for a grouped unit, the module's name for one alone.
QString unitLabel(const std::string& unit, int index) {
    const size_t first = unit.find('+');
    if (first == std::string::npos) return QString("%1: %2").arg(index + 1).arg(QString::fromStdString(unit));
    const size_t last = unit.rfind('+');
    const auto count = std::count(unit.begin(), unit.end(), '+') + 1;
    return QString("%1: %2 .. %3 (%4 modules)")
        .arg(index + 1)
        .arg(QString::fromStdString(unit.substr(0, first)), QString::fromStdString(unit.substr(last + 1)))
        .arg(count);
}
}  // namespace

void ModuleTree::setPlan(std::shared_ptr<const PlanResult> plan) {
    const core::Model& model = *plan->plan.model;
    if (m_model != plan->plan.model) {
        m_model = plan->plan.model;
        clear();
        m_items.assign(model.modules.size(), nullptr);
        std::vector<int64_t> params(model.modules.size(), 0);
        for (const core::Param& p : model.params) params[static_cast<size_t>(p.module)] += p.numel();
        // Parents precede children: a reverse pass sums each subtree into its parent.
        for (size_t m = model.modules.size(); m-- > 1;) {
            params[static_cast<size_t>(model.modules[m].parent)] += params[m];
        }
        for (size_t m = 0; m < model.modules.size(); ++m) {
            const core::Module& mod = model.modules[m];
            const QString fqn = QString::fromStdString(mod.name);
            const QString shortName = m == 0 ? QString::fromStdString(model.name) : fqn.section('.', -1);
            auto* item = mod.parent < 0 ? new QTreeWidgetItem(this) : new QTreeWidgetItem(m_items[static_cast<size_t>(mod.parent)]);
            item->setText(Name, shortName + (mod.is_block ? "  [block]" : ""));
            item->setToolTip(Name, fqn.isEmpty() ? "(root)" : fqn);
            item->setText(Params, QLocale::c().toString(static_cast<qlonglong>(params[m])));
            item->setTextAlignment(Params, Qt::AlignRight | Qt::AlignVCenter);
            if (m > 0 && !mod.is_container) {
                item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
                item->setCheckState(Name, Qt::Unchecked);
            }
            m_items[m] = item;
        }
        if (!m_items.empty()) m_items[0]->setExpanded(true);
    }
    // Units by module: a listed module's unit, else its parent's; the root's unit is "(root)".
    std::vector<std::string> unit_names;
    for (const core::UnitInfo& u : plan->eval.program.units) {
        if (!u.is_root) unit_names.push_back(u.name);
    }
    const std::map<std::string, std::string> unit_of = unitsByModule(unit_names);
    std::vector<std::string> unit(model.modules.size(), "(root)");
    for (size_t m = 1; m < model.modules.size(); ++m) {
        auto it = unit_of.find(model.modules[m].name);
        unit[m] = it != unit_of.end() ? it->second : unit[static_cast<size_t>(model.modules[m].parent)];
    }
    for (size_t m = 0; m < m_items.size(); ++m) {
        m_items[m]->setText(Unit, QString::fromStdString(unit[m]));
        if (m_items[m]->flags() & Qt::ItemIsUserCheckable) {
            m_items[m]->setCheckState(Name, unit_of.count(model.modules[m].name) ? Qt::Checked : Qt::Unchecked);
        }
    }
}

void ModuleTree::setSearch(std::shared_ptr<const WrapResult> wrap) {
    m_search = std::move(wrap);
    drawSearch();
}

void ModuleTree::drawSearch() {
    for (QTreeWidgetItem* item : m_items) {
        item->setText(Search, {});
        item->setToolTip(Search, {});
        for (int c = 0; c < ColumnCount; ++c) item->setBackground(c, QBrush());
    }
    if (!m_search || !m_model || m_search->base.model != m_model || !m_search->search_ok) return;
    const std::vector<std::string>& units = m_search->search.wrap.modules;
    const std::map<std::string, std::string> unit_of = unitsByModule(units);
    std::map<std::string, int> index;
    for (size_t i = 0; i < units.size(); ++i) index[units[i]] = static_cast<int>(i);
    // A module in no searched unit takes its parent's (the blocks' children); the root stays empty.
    std::vector<int> of(m_items.size(), -1);
    for (size_t m = 1; m < m_items.size(); ++m) {
        auto it = unit_of.find(m_model->modules[m].name);
        of[m] = it != unit_of.end() ? index[it->second] : of[static_cast<size_t>(m_model->modules[m].parent)];
    }
    // Two alternating shades, so neighbouring units stand apart.
    const QColor shades[2] = {QColor(0xde, 0xeb, 0xf7), QColor(0xfd, 0xe8, 0xcf)};
    for (size_t m = 1; m < m_items.size(); ++m) {
        if (of[m] < 0) continue;
        const QString label = unitLabel(units[static_cast<size_t>(of[m])], of[m]);
        m_items[m]->setText(Search, label);
        m_items[m]->setToolTip(Search, QString("The exact wrap search puts this module in unit %1 of %2 (%3)")
                                           .arg(of[m] + 1)
                                           .arg(units.size())
                                           .arg(QString::fromStdString(m_search->search.wrap.modules[static_cast<size_t>(of[m])])));
        for (int c = 0; c < ColumnCount; ++c) m_items[m]->setBackground(c, shades[of[m] % 2]);
    }
}

QString ModuleTree::searchUnit(const QString& fqn) const {
    for (const QTreeWidgetItem* item : m_items) {
        if (item->toolTip(Name) == fqn) return item->text(Search);
    }
    return {};
}

QStringList ModuleTree::checkedModules() const {
    QStringList out;
    for (const QTreeWidgetItem* item : m_items) {
        if ((item->flags() & Qt::ItemIsUserCheckable) && item->checkState(Name) == Qt::Checked) {
            out << item->toolTip(Name);
        }
    }
    return out;
}

void ModuleTree::setChecked(const QString& fqn, bool checked) {
    for (QTreeWidgetItem* item : m_items) {
        if ((item->flags() & Qt::ItemIsUserCheckable) && item->toolTip(Name) == fqn) {
            item->setCheckState(Name, checked ? Qt::Checked : Qt::Unchecked);
        }
    }
}

void ModuleTree::applyChecked() { emit unitsChosen(checkedModules()); }

}  // namespace shardcast::gui
