// The input dock (gui/app/input_panel.hpp): overrides hold only what the user changed from the base
// plan; errors land under the knob their message names; every knob explains itself.
#include <QLabel>
#include <QSignalSpy>
#include <QtTest>

#include "core/plan/plan_build.hpp"
#include "core/plan/sharding.hpp"
#include "gui/app/input_panel.hpp"

using namespace shardcast;

namespace {
const QString kExample = SHARDCAST_SOURCE_DIR "/examples/llama-3.1-8b-8xh100.json";
const QStringList kKnobs = {"model", "gpu", "nodes", "gpus-per-node", "micro-batch", "seq-len", "grad-accum", "no-sync",
                            "param-dtype", "reduce-dtype", "master-dtype", "optimizer", "ac", "attention", "kernels", "impl",
                            "offload", "frozen", "strategy", "shard-size", "fsdp", "wrap", "reshard-after-forward",
                            "prefetch-depth", "forward-prefetch", "backward-prefetch", "profile", "tp",
                            "sequence-parallel", "loss-parallel", "async-tp", "pp", "pp-schedule", "pp-virtual-stages",
                            "clip-grad-norm", "lora", "all-gather-dtype", "checkpoint", "checkpoint-every", "checkpoint-offload-to-cpu"};
}  // namespace

class InputPanelTest : public QObject {
    Q_OBJECT
private slots:
    void overridesHoldOnlyChangedKnobs() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        core::PlanOverrides o = panel.overrides();
        QCOMPARE(QString::fromStdString(o.plan_file), kExample);
        QVERIFY(!o.model && !o.strategy && !o.micro_batch && !o.ac && !o.seq_len && !o.nodes);
        QCOMPARE(panel.knobText("seq-len"), QString("8192"));
        QSignalSpy changed(&panel, &gui::InputPanel::changed);
        QVERIFY(panel.setKnob("seq-len", "4096"));
        QVERIFY(panel.setKnob("strategy", "HYBRID_SHARD"));
        QCOMPARE(changed.count(), 2);
        o = panel.overrides();
        QCOMPARE(o.seq_len.value_or(0), int64_t{4096});
        QCOMPARE(QString::fromStdString(o.strategy.value_or("")), QString("HYBRID_SHARD"));
        QVERIFY(!o.micro_batch && !o.wrap);
    }

    // "--gpu" is a prefix of "--gpus-per-node": the error goes under the knob named in full.
    void errorsLandUnderTheirKnob() {
        gui::InputPanel panel;
        panel.showError("--gpus-per-node: must be at most 64 (got 65)");
        QVERIFY(!panel.errorText("gpus-per-node").isEmpty());
        QVERIFY(panel.errorText("gpu").isEmpty());
        panel.showError("--gpu: unknown GPU 'Z100'; valid: A100-SXM, H100-SXM");
        QVERIFY(!panel.errorText("gpu").isEmpty());
        QVERIFY(panel.errorText("gpus-per-node").isEmpty());
        // A validation error names the plan field; the first field named wins.
        panel.showError("sharding.shard_size 3 differs from the world size 8 (cluster.nodes x cluster.gpus_per_node)");
        QVERIFY(!panel.errorText("shard-size").isEmpty());
        QVERIFY(panel.errorText("nodes").isEmpty());
        // Nothing named: the panel-wide label.
        panel.showError("plan.json: not a JSON object");
        QCOMPARE(panel.errorText(""), QString("plan.json: not a JSON object"));
        QVERIFY(panel.errorText("shard-size").isEmpty());
        panel.clearErrors();
        QVERIFY(panel.errorText("").isEmpty());
    }

    // LoRA: empty in the example, an override once set, and buildPlan's error lands under it.
    void loraKnob() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        QCOMPARE(panel.knobText("lora"), QString("0"));
        QVERIFY(!panel.overrides().lora);
        QVERIFY(panel.setKnob("lora", "16:q_proj,v_proj"));
        const core::PlanOverrides o = panel.overrides();
        QCOMPARE(QString::fromStdString(o.lora.value_or("")), QString("16:q_proj,v_proj"));
        auto plan = core::buildPlan(o);
        QVERIFY(plan.ok());
        QCOMPARE(plan->model->numParams() - plan->base_model->numParams(), int64_t{32 * 2 * 16 * (4096 + 4096)} - 32 * 16 * 3072);
        QVERIFY(panel.setKnob("lora", "16:nope"));
        auto bad = core::buildPlan(panel.overrides());
        QVERIFY(!bad.ok());
        panel.showError(QString::fromStdString(bad.error().message));
        QVERIFY2(panel.errorText("lora").contains("matches no linear module"), qPrintable(panel.errorText("lora")));
    }

    void allGatherDtypeKnob() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        QCOMPARE(panel.knobText("all-gather-dtype"), QString("param"));
        QVERIFY(!panel.overrides().all_gather_dtype);
        QVERIFY(panel.setKnob("all-gather-dtype", "fp8"));
        auto plan = core::buildPlan(panel.overrides());
        QVERIFY(plan.ok());
        QVERIFY(plan->training.all_gather_dtype == core::AllGatherDtype::Fp8);
    }

    void everyKnobHasATooltip() {
        gui::InputPanel panel;
        for (const QString& key : kKnobs) {
            QWidget* editor = panel.knobEditor(key);
            QVERIFY2(editor != nullptr, qPrintable(key));
            const QString tip = editor->toolTip();
            // One sentence that names PyTorch's setting in parentheses.
            QVERIFY2(tip.endsWith('.') && tip.contains('(') && tip.contains(')'), qPrintable(key + ": " + tip));
        }
    }

    // The prefetch knobs fill from the plan file and become --prefetch-depth / --forward-prefetch /
    // --backward-prefetch overrides only when changed.
    void prefetchKnobs() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        QCOMPARE(panel.knobText("prefetch-depth"), QString("1"));
        QCOMPARE(panel.knobText("backward-prefetch"), QString("pre"));
        core::PlanOverrides o = panel.overrides();
        QVERIFY(!o.prefetch_depth && !o.forward_prefetch && !o.backward_prefetch);
        QVERIFY(panel.setKnob("prefetch-depth", "3"));
        QVERIFY(panel.setKnob("forward-prefetch", "true"));
        QVERIFY(panel.setKnob("backward-prefetch", "post"));
        o = panel.overrides();
        QCOMPARE(o.prefetch_depth.value_or(0), int64_t{3});
        QCOMPARE(QString::fromStdString(o.forward_prefetch.value_or("")), QString("true"));
        QCOMPARE(QString::fromStdString(o.backward_prefetch.value_or("")), QString("post"));
        auto plan = core::buildPlan(o);
        QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
        QCOMPARE(plan->sharding.prefetch_depth, 3);
        QVERIFY(plan->sharding.forward_prefetch);
        QCOMPARE(plan->sharding.backward_prefetch, core::ShardingSpec::BackwardPrefetch::Post);
    }

    // The pipeline knobs: pp, the schedule and the stages per rank become --pp / --pp-schedule /
    // --pp-virtual-stages overrides, and the plan they build runs Interleaved1F1B over 2 x 2 stages.
    void pipelineKnobs() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        QCOMPARE(panel.knobText("pp"), QString("1"));
        QCOMPARE(panel.knobText("pp-virtual-stages"), QString("1"));
        QVERIFY(panel.setKnob("pp", "2"));
        QVERIFY(panel.setKnob("pp-schedule", "Interleaved1F1B"));
        QVERIFY(panel.setKnob("pp-virtual-stages", "2"));
        QVERIFY(panel.setKnob("grad-accum", "4"));
        const core::PlanOverrides o = panel.overrides();
        QCOMPARE(o.pp.value_or(0), int64_t{2});
        QCOMPARE(QString::fromStdString(o.pp_schedule.value_or("")), QString("Interleaved1F1B"));
        QCOMPARE(o.pp_virtual_stages.value_or(0), int64_t{2});
        auto plan = core::buildPlan(o);
        QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
        QCOMPARE(plan->sharding.pp_schedule, core::PpSchedule::Interleaved1F1B);
        QCOMPARE(plan->sharding.pp_virtual_stages, 2);
        auto mesh = core::validatePlan(*plan);
        QVERIFY2(mesh.ok(), mesh.ok() ? "" : mesh.error().message.c_str());
        QCOMPARE(mesh->stages(), 4);
    }

    // The profile knob: documented figures by default (""), stored names offered, the choice kept
    // when the list is refreshed, and no plan override (the profile is not a plan field).
    void profileKnob() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        QCOMPARE(panel.profileArg(), QString());
        panel.setStoredProfiles({"slow-h100", "lab"});
        QSignalSpy changed(&panel, &gui::InputPanel::changed);
        QVERIFY(panel.setKnob("profile", "lab"));
        QCOMPARE(changed.count(), 1);
        QCOMPARE(panel.profileArg(), QString("lab"));
        panel.setStoredProfiles({"new", "lab", "slow-h100"});
        QCOMPARE(panel.profileArg(), QString("lab"));
        QCOMPARE(changed.count(), 1);  // refreshing the list is not a change
        QVERIFY(panel.setKnob("profile", ""));
        QCOMPARE(panel.profileArg(), QString());
        const core::PlanOverrides o = panel.overrides();
        QVERIFY(!o.gpu);
    }

    void applyingACandidateSetsItsKnobsOnce() {
        gui::InputPanel panel;
        QVERIFY(panel.setBasePlan(kExample).ok());
        QSignalSpy changed(&panel, &gui::InputPanel::changed);
        sim::SweepCandidate c;
        c.strategy = core::Strategy::ShardGradOp;
        c.wrap.kind = core::WrapKind::EveryK;
        c.wrap.k = 4;
        c.micro_batch = 2;
        c.ac = core::AcSpec{core::Checkpointing::Full, 1};
        panel.applyCandidate(c);
        QCOMPARE(changed.count(), 1);
        const core::PlanOverrides o = panel.overrides();
        QCOMPARE(QString::fromStdString(o.strategy.value_or("")), QString("SHARD_GRAD_OP"));
        QCOMPARE(QString::fromStdString(o.wrap.value_or("")), QString("every:4"));
        QCOMPARE(o.micro_batch.value_or(0), int64_t{2});
        QCOMPARE(QString::fromStdString(o.ac.value_or("")), QString("full"));
    }
};

QTEST_MAIN(InputPanelTest)
#include "input_panel_test.moc"
