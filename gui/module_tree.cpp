#include "gui/module_tree.hpp"

#include <map>
#include <string>

#include <QHeaderView>

namespace shardcast::gui {

ModuleTree::ModuleTree(QWidget* parent) : QTreeWidget(parent) {
    setColumnCount(ColumnCount);
    setHeaderLabels({"module", "params", "FSDP unit"});
    header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    setUniformRowHeights(true);
    setToolTip("The model's modules (named_modules()), parameters per subtree, and the FSDP unit each belongs to.");
}

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
    std::map<std::string, std::string> unit_of;
    for (const core::UnitInfo& u : plan->eval.program.units) {
        if (u.is_root) continue;
        size_t from = 0;
        while (from <= u.name.size()) {
            const size_t plus = u.name.find('+', from);
            unit_of[u.name.substr(from, plus == std::string::npos ? std::string::npos : plus - from)] = u.name;
            if (plus == std::string::npos) break;
            from = plus + 1;
        }
    }
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
