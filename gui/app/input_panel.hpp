#pragma once
// The input dock: every knob of a plan, each with a one-sentence tooltip naming PyTorch's
// setting, and a red error label under it. It only edits a core::PlanOverrides (the command
// line's spellings); the planner builds and evaluates the plan.
#include <functional>
#include <vector>

#include <QString>
#include <QWidget>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "search/sweep.hpp"

class QComboBox;
class QFormLayout;
class QLabel;

namespace shardcast::gui {

class InputPanel : public QWidget {
    Q_OBJECT
public:
    explicit InputPanel(QWidget* parent = nullptr);

    // The plan file the knobs start from: its values fill the knobs; a knob left at the file's
    // value is not overridden (fields without a knob keep the file's value). Errors: the file's.
    core::Status setBasePlan(const QString& path);
    QString basePlanPath() const { return m_base_path; }

    core::PlanOverrides overrides() const;
    // The hardware profile knob: "" (the GPU's documented figures), a profile JSON file, or the
    // name of a stored profile (gui::computePlan's `profile`).
    QString profileArg() const;
    // The stored profiles the profile knob offers (newest first); keeps the current choice.
    void setStoredProfiles(const QStringList& names);

    // Sets a knob by its flag name ("strategy", "micro-batch", ...) as the user would; emits
    // changed(). False when there is no such knob.
    bool setKnob(const QString& key, const QString& value);
    QString knobText(const QString& key) const;
    QWidget* knobEditor(const QString& key) const;
    // Adds a model config / module-tree file to the model list and selects it.
    void openModelFile(const QString& path);
    // Applies a sweep candidate: strategy, wrap policy, micro-batch and AC; one changed().
    void applyCandidate(const sim::SweepCandidate& candidate);

    // An error from building or evaluating the plan, shown under the knob it names (the flag or
    // the plan field in the message), else at the top of the panel.
    void showError(const QString& message);
    void clearErrors();
    // The error text under a knob ("" when none); key "" is the panel-wide label.
    QString errorText(const QString& key) const;

signals:
    void changed();

private:
    struct Knob {
        QString key;    // the command line's flag without "--"
        QString field;  // the plan field validation errors name ("training.micro_batch")
        QWidget* editor = nullptr;
        QLabel* error = nullptr;
        QString baseline;  // the base plan's value ("" when there is no base plan)
        std::function<QString()> text;
        std::function<void(const QString&)> set;
    };
    Knob& addKnob(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                  const QString& tooltip, QWidget* editor);
    void addCombo(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                  const QString& tooltip, const QStringList& items, bool editable);
    void addSpin(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                 const QString& tooltip, int min, int max, const QString& special = {});
    void addLine(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                 const QString& tooltip);
    const Knob* find(const QString& key) const;
    Knob* find(const QString& key);
    void fillFromPlan(const core::Plan& plan);
    void emitChanged();

    std::vector<Knob> m_knobs;
    QComboBox* m_model = nullptr;
    QLabel* m_general_error = nullptr;
    QString m_base_path;
    int m_updating = 0;  // > 0 while knobs are set programmatically: one changed() at the end
};

}  // namespace shardcast::gui
