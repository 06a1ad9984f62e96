#pragma once
// The model's module tree with parameter counts per module (its subtree) and the FSDP unit each
// module belongs to in the current plan (the unit names of the lowered Program).
#include <memory>

#include <QTreeWidget>

#include "gui/plan_results.hpp"

namespace shardcast::gui {

class ModuleTree : public QTreeWidget {
    Q_OBJECT
public:
    enum Column { Name, Params, Unit, ColumnCount };
    explicit ModuleTree(QWidget* parent = nullptr);
    void setPlan(std::shared_ptr<const PlanResult> plan);

private:
    std::shared_ptr<const core::Model> m_model;  // the model the items were built for
    std::vector<QTreeWidgetItem*> m_items;       // per module index
};

}  // namespace shardcast::gui
