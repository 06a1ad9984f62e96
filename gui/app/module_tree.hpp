#pragma once
// The model's module tree with parameter counts per module (its subtree) and the FSDP unit each
// module belongs to in the current plan (the unit names of the lowered Program). It is also an
// explicit unit picker: modules that are units are checked; applyChecked() asks for a wrap policy
// that makes exactly the checked modules units. The exact wrap search's grouping (sim::searchWrap,
// from the wrap stage) is drawn on it: a "search unit" column and one shade per searched unit.
#include <memory>

#include <QTreeWidget>

#include "gui/state/plan_results.hpp"

namespace shardcast::gui {

class ModuleTree : public QTreeWidget {
    Q_OBJECT
public:
    enum Column { Name, Params, Unit, Search, ColumnCount };
    explicit ModuleTree(QWidget* parent = nullptr);
    void setPlan(std::shared_ptr<const PlanResult> plan);
    // The search's grouping of `wrap` (the base plan's model); cleared when the search failed.
    void setSearch(std::shared_ptr<const WrapResult> wrap);
    // The search unit shown for a module ("" when none), for tests.
    QString searchUnit(const QString& fqn) const;
    QStringList checkedModules() const;  // FQNs, in module order
    void setChecked(const QString& fqn, bool checked);
    void applyChecked();                 // emits unitsChosen(checkedModules())

signals:
    void unitsChosen(const QStringList& fqns);

private:
    std::shared_ptr<const core::Model> m_model;  // the model the items were built for
    std::vector<QTreeWidgetItem*> m_items;       // per module index
    std::shared_ptr<const WrapResult> m_search;  // drawn when its model is the one shown
    void drawSearch();
};

}  // namespace shardcast::gui
