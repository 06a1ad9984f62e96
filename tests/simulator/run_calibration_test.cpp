// Fitting a profile to one measured run (simulator/run_calibration.hpp): the "measured" run is the
// prediction on a known profile, so the fit must find that profile's figures and reproduce its step.
#include "simulator/run_calibration.hpp"

#include <memory>

#include <gtest/gtest.h>

#include "core/model_io.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

core::Plan cpuPlan() {
    auto m = core::resolveModel("tiny-llama");
    EXPECT_TRUE(m.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*m));
    plan.model_ref = "tiny-llama";
    plan.cluster.gpu = *core::findGpuPreset("cpu");
    plan.cluster.gpus_per_node = 2;
    plan.training.seq_len = 128;
    plan.training.micro_batch = 2;
    plan.training.param_dtype = core::DType::F32;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    return plan;
}

TEST(RunCalibrationTest, FindsTheProfileThatMadeTheRun) {
    const core::Plan plan = cpuPlan();
    const HardwareProfile base = HardwareProfile::fromCluster(plan.cluster);
    ASSERT_TRUE(base.gpu.host_device);
    HardwareProfile truth = base;
    truth.forward_efficiency_max *= 0.5;
    truth.attention_forward_efficiency *= 0.5;
    truth.backward_efficiency_max *= 0.4;
    truth.attention_backward_efficiency *= 0.4;
    truth.hbm_efficiency *= 0.3;
    truth.gpu.nvlink_bytes_per_s = 1e9;
    truth.nvlink_all_gather_efficiency = 1.0;
    truth.nvlink_reduce_scatter_efficiency = 0.5;
    truth.busbw_half_bytes = 0;
    truth.gpu.intra_node_latency_s = 20e-6;
    truth.unit_hook_ns = 2 * base.unit_hook_ns + 1'000'000;
    auto run = evaluatePlan(plan, &truth, {});
    ASSERT_TRUE(run) << run.error().message;

    auto fit = calibrateFromRun(plan, base, run->timeline, {}, "test");
    ASSERT_TRUE(fit) << fit.error().message;
    EXPECT_EQ(fit->measured_step_ns, run->timeline.step_ns);
    EXPECT_NE(fit->predicted_step_before_ns, run->timeline.step_ns);
    // The fitted profile predicts the run's step (the fit closes each work class's busy time).
    EXPECT_NEAR(static_cast<double>(fit->predicted_step_after_ns) / static_cast<double>(run->timeline.step_ns), 1.0, 0.01);
    EXPECT_NEAR(fit->profile.forward_efficiency_max / truth.forward_efficiency_max, 1.0, 0.05);
    EXPECT_NEAR(fit->profile.backward_efficiency_max / truth.backward_efficiency_max, 1.0, 0.05);
    EXPECT_NEAR(fit->profile.hbm_efficiency / truth.hbm_efficiency, 1.0, 0.05);
    // Collectives: exact times of two sizes per kind give the bandwidths back.
    EXPECT_NEAR(fit->profile.gpu.nvlink_bytes_per_s * fit->profile.nvlink_all_gather_efficiency / 1e9, 1.0, 0.02);
    EXPECT_NEAR(fit->profile.gpu.nvlink_bytes_per_s * fit->profile.nvlink_reduce_scatter_efficiency / 0.5e9, 1.0, 0.02);
    // Host time between tasks (hooks) is what the step has beyond its tasks: the truth's own.
    EXPECT_NEAR(static_cast<double>(fit->profile.unit_hook_ns) / static_cast<double>(truth.unit_hook_ns), 1.0, 0.05);
    // It says what it kept: nothing here measures an all-reduce or the network.
    bool kept_network = false;
    for (const RunFitLine& l : fit->lines) kept_network = kept_network || (l.figure == "network_efficiency" && !l.fitted);
    EXPECT_TRUE(kept_network);
}

TEST(RunCalibrationTest, ARunOfAnotherPlanIsAnError) {
    const core::Plan plan = cpuPlan();
    const HardwareProfile base = HardwareProfile::fromCluster(plan.cluster);
    core::Timeline wrong;
    wrong.tasks.resize(3);
    auto fit = calibrateFromRun(plan, base, wrong, {}, "test");
    ASSERT_FALSE(fit);
    EXPECT_NE(fit.error().message.find("not a run of this plan"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::sim
