// Checkpoint saves (simulator/checkpoint.hpp): the goodput model against figures worked by hand,
// and Llama-3.1-70B on 32 H100s, whose full save without offload_to_cpu cannot fit on rank 0.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/plan/plan_build.hpp"
#include "simulator/checkpoint.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

// Llama-3.1-70B: 70,553,706,496 parameters (the HF checkpoint's count: 80 blocks of 855,654,400,
// the embedding and the LM head of 128,256 x 8,192 each, the final norm of 8,192).
constexpr int64_t k70bParams = 80 * 855'654'400LL + 2 * 128'256LL * 8'192 + 8'192;
static_assert(k70bParams == 70'553'706'496LL);

TEST(CheckpointTest, GoodputAndYoungsIntervalByHand) {
    // Save 100 s, restart 100 s, a failure every 20,000 s: Young's interval sqrt(2 x 100 x 20,000)
    // = 2,000 s; goodput 2,000 / (2,100 x (1 + (2,100 + 200) / 40,000)) = 2,000 / 2,220.75.
    EXPECT_DOUBLE_EQ(youngInterval(100, 20000), 2000);
    EXPECT_NEAR(checkpointGoodput(2000, 100, 100, 20000), 2000.0 / 2220.75, 1e-12);
    // Without failures a save costs only its own time: tau / (tau + d).
    EXPECT_DOUBLE_EQ(checkpointGoodput(900, 100, 100, INFINITY), 0.9);
    EXPECT_TRUE(std::isinf(youngInterval(100, INFINITY)));
    // Young's interval is where first-order goodput peaks: 10% either side is worse.
    const double at = checkpointGoodput(2000, 100, 100, 20000);
    EXPECT_GT(at, checkpointGoodput(1800, 100, 100, 20000));
    EXPECT_GT(at, checkpointGoodput(2200, 100, 100, 20000));
    EXPECT_EQ(checkpointGoodput(0, 100, 100, 20000), 0.0);
}

Evaluation evaluate70b(core::CheckpointMode mode, bool offload, bool rank0_only) {
    core::Plan plan = testing::h100Plan("llama-3.1-70b", 4, 4096);
    // So that the training step fits (reserved 57.3 GiB of 80): full checkpointing, expandable segments.
    plan.training.ac = core::Checkpointing::Full;
    plan.training.allocator = core::AllocatorMode::Expandable;
    plan.checkpoint.mode = mode;
    plan.checkpoint.offload_to_cpu = offload;
    plan.checkpoint.rank0_only = rank0_only;
    EvaluationOptions options;
    options.per_unit = false;
    auto e = evaluatePlan(plan, nullptr, options);
    EXPECT_TRUE(e.ok()) << e.error().message;
    EXPECT_TRUE(e->checkpoint.has_value());
    return std::move(*e);
}

int64_t initialBytes(const Evaluation& e) {
    int64_t b = 0;
    for (int64_t v : e.program.initial) b += v;
    return b;
}

TEST(CheckpointTest, FullSaveOf70BOn32H100sIsOutOfMemoryOnRank0WithoutOffload) {
    const Evaluation e = evaluate70b(core::CheckpointMode::Full, false, true);
    const CheckpointFigures& f = *e.checkpoint;
    EXPECT_TRUE(e.fit.fits) << "the training step itself fits";
    // The state: fp32 parameters (282 GB, the FSDP guide's "280 GB for 70B") and AdamW's two fp32
    // states per parameter.
    EXPECT_EQ(f.model_bytes, k70bParams * 4);
    EXPECT_EQ(f.optimizer_bytes, k70bParams * 8);
    // Without offload_to_cpu the gathered state stays on rank 0's device: far beyond 80 GB.
    EXPECT_EQ(f.rank0_peak_bytes, initialBytes(e) + k70bParams * 12);
    EXPECT_FALSE(f.rank0_fits);
    EXPECT_EQ(f.budget_bytes, e.fit.budget_bytes);
    // The write: 846,644,477,952 bytes from rank 0 at its node's 2 TB/s / 2,048 nodes = 976,562,500
    // bytes/s: 866.96 s.
    EXPECT_NEAR(f.write_s, 846'644'477'952.0 / 976'562'500.0, 1e-6);
    EXPECT_NEAR(f.write_s, 866.96, 0.01);
    EXPECT_EQ(f.to_host_s, 0.0);
    EXPECT_GT(f.gather_s, 0.0);
    EXPECT_DOUBLE_EQ(f.save_s, f.gather_s + f.to_host_s + f.write_s);
    // Failures: 419 / (54 x 24 x 16,384) per GPU-hour on 32 GPUs.
    EXPECT_NEAR(f.mtbf_s, 3600.0 * 54 * 24 * 16384 / (419.0 * 32), 1e-3);
}

TEST(CheckpointTest, FullSaveWithOffloadHoldsOneTensorAtATime) {
    const Evaluation e = evaluate70b(core::CheckpointMode::Full, true, true);
    const CheckpointFigures& f = *e.checkpoint;
    // FSDP2 gathers one tensor at a time and moves it to the host: the largest is the embedding's
    // (or the LM head's) 128,256 x 8,192 fp32 = 4,202,692,608 bytes.
    EXPECT_EQ(f.rank0_peak_bytes, initialBytes(e) + 128'256LL * 8'192 * 4);
    EXPECT_TRUE(f.rank0_fits);
    EXPECT_EQ(f.rank0_host_bytes, k70bParams * 12);
    EXPECT_EQ(f.node_host_bytes, k70bParams * 12);  // rank0_only: the other ranks keep nothing
    // The copies to the host at the H100 preset's host link.
    EXPECT_NEAR(f.to_host_s, static_cast<double>(k70bParams * 12) / e.profile.gpu.host_link_bytes_per_s, 1e-9);
    // Without rank0_only every rank of the node keeps a copy on the host.
    const Evaluation all = evaluate70b(core::CheckpointMode::Full, true, false);
    EXPECT_EQ(all.checkpoint->node_host_bytes, 8 * k70bParams * 12);
}

TEST(CheckpointTest, ShardedSaveWritesOneWorldthPerRankAndPicksTheBestInterval) {
    const Evaluation e = evaluate70b(core::CheckpointMode::Sharded, false, false);
    const CheckpointFigures& f = *e.checkpoint;
    // 846,644,477,952 bytes over 32 ranks: 26,457,639,936 each; a node's 8 ranks write 211.66 GB
    // at 976,562,500 bytes/s: 216.74 s.
    EXPECT_EQ(f.per_rank_bytes, 26'457'639'936LL);
    EXPECT_NEAR(f.write_s, 8.0 * 26'457'639'936.0 / 976'562'500.0, 1e-6);
    EXPECT_EQ(f.gather_s, 0.0);
    EXPECT_EQ(f.rank0_peak_bytes, initialBytes(e));
    EXPECT_TRUE(f.rank0_fits);
    // The interval: 500 steps; the best is a whole number of steps next to Young's interval, and no
    // worse than its neighbours.
    const double step = static_cast<double>(e.timeline.step_ns) * 1e-9;
    EXPECT_DOUBLE_EQ(f.interval_s, 500 * step);
    const double young = std::sqrt(2 * f.save_s * f.mtbf_s) / step;
    EXPECT_LE(std::abs(static_cast<double>(f.best_every_steps) - young), 1.0);
    auto g = [&](int64_t steps) { return checkpointGoodput(static_cast<double>(steps) * step, f.save_s, f.restart_s, f.mtbf_s); };
    EXPECT_DOUBLE_EQ(f.best_goodput, g(f.best_every_steps));
    EXPECT_GE(f.best_goodput, g(f.best_every_steps - 1));
    EXPECT_GE(f.best_goodput, g(f.best_every_steps + 1));
    EXPECT_GT(f.best_goodput, f.goodput);  // 500 steps saves far more often than failures call for
}

TEST(CheckpointTest, FlagsAndPlanFieldsAreCheckedByName) {
    core::PlanOverrides o;
    o.model = "llama-3.1-8b";
    o.checkpoint = "full";
    o.checkpoint_every = 0;
    auto zero = core::buildPlan(o);
    ASSERT_FALSE(zero.ok());
    EXPECT_NE(zero.error().message.find("--checkpoint-every 0"), std::string::npos) << zero.error().message;
    o.checkpoint_every.reset();
    o.checkpoint = "dcp";
    auto mode = core::buildPlan(o);
    ASSERT_FALSE(mode.ok());
    EXPECT_NE(mode.error().message.find("valid: none, full, sharded"), std::string::npos) << mode.error().message;
    o.checkpoint = "sharded";
    o.checkpoint_offload_to_cpu = "true";
    auto sharded = core::buildPlan(o);
    ASSERT_TRUE(sharded.ok()) << sharded.error().message;
    auto refused = core::validatePlan(*sharded);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("checkpoint.offload_to_cpu"), std::string::npos) << refused.error().message;
    o.checkpoint_offload_to_cpu.reset();
    // A plan file's section: written, read back the same, and its bad values named.
    o.checkpoint = "full";
    o.checkpoint_every = 250;
    auto plan = core::buildPlan(o);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const nlohmann::json j = core::planToJson(*plan);
    ASSERT_TRUE(j.contains("checkpoint"));
    auto back = core::planFromJson(j, "plan.json", ".");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->checkpoint, plan->checkpoint);
    nlohmann::json bad = j;
    bad["checkpoint"]["every_steps"] = 0;
    auto every = core::planFromJson(bad, "plan.json", ".");
    ASSERT_FALSE(every.ok());
    EXPECT_NE(every.error().message.find("plan.json: checkpoint.every_steps must be a positive number"), std::string::npos)
        << every.error().message;
    bad = j;
    bad["checkpoint"]["interval"] = 10;
    auto key = core::planFromJson(bad, "plan.json", ".");
    ASSERT_FALSE(key.ok());
    EXPECT_NE(key.error().message.find("unknown key 'checkpoint.interval'"), std::string::npos) << key.error().message;
    bad = j;
    bad["cluster"]["storage_bytes_per_s_per_node"] = -1;
    auto storage = core::planFromJson(bad, "plan.json", ".");
    ASSERT_FALSE(storage.ok());
    EXPECT_NE(storage.error().message.find("cluster.storage_bytes_per_s_per_node"), std::string::npos)
        << storage.error().message;
    // No checkpoint: no section, no figures.
    core::PlanOverrides none;
    none.model = "llama-3.1-8b";
    auto plain = core::buildPlan(none);
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE(core::planToJson(*plain).contains("checkpoint"));
}

}  // namespace
}  // namespace shardcast::sim
