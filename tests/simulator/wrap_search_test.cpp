#include <algorithm>
#include <limits>
#include <memory>

#include <gtest/gtest.h>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "search/wrap_search.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/pytorch_code.hpp"
#include "simulator/simulator.hpp"

namespace shardcast::sim {
namespace {

HardwareProfile h100Profile(double latency_s) {
    core::ClusterSpec cluster;
    cluster.gpu = *core::findGpuPreset("H100-SXM");
    HardwareProfile p = HardwareProfile::fromCluster(cluster);
    p.gpu.intra_node_latency_s = latency_s;  // large: merging units saves collective latency
    return p;
}

// Eight blocks of different sizes and costs: no symmetry for the search to lean on.
WrapCostInputs toyInputs() {
    WrapCostInputs in;
    for (int b = 0; b < 8; ++b) {
        BlockFigures f;
        const int64_t scale = 1 + (b * 5) % 3;
        f.fwd_ns = 1e5 * static_cast<double>(1 + b % 4);
        f.bwd_ns = 2 * f.fwd_ns;
        f.unsharded_bytes = f.in_flight_bytes = f.ag_bytes = f.ag_bwd_bytes = scale * 200 * core::kMiB;
        f.wait_bytes = 2 * f.unsharded_bytes;  // FSDP2's copy-out: flat output and parameters
        f.rs_bytes = f.rs_input_bytes = 2 * f.ag_bytes;
        f.grad_shard_bytes = f.rs_bytes / 8;
        f.fwd_delta_bytes = (100 + 37 * b) * core::kMiB;
        f.fwd_peak_bytes = f.fwd_delta_bytes + 50 * core::kMiB;
        f.bwd_delta_bytes = f.unsharded_bytes - f.fwd_delta_bytes;
        f.bwd_peak_bytes = f.unsharded_bytes + 30 * core::kMiB;
        f.fwd_tasks = f.bwd_tasks = 1;
        in.blocks.push_back(f);
    }
    in.root_pre.fwd_ns = 5e4;
    in.root_post.fwd_ns = 3e5;
    in.root_post.bwd_ns = 6e5;
    in.ag_group = in.ag_bwd_group = in.rs_group = CollectiveGroup{8, 1};
    in.unit_tasks_fwd = 3;
    in.unit_tasks_bwd = 4;
    in.base_bytes = 10 * core::kGiB;
    return in;
}

// The exhaustive optimum under the same model: 2^7 groupings.
WrapChoice bruteForce(const WrapCostModel& m, int64_t cap) {
    WrapChoice best;
    for (const Grouping& g : allGroupings(m.blockCount())) {
        if (m.peakBytes(g) > cap) continue;
        const double ns = m.stepNs(g);
        if (!best.found || ns < best.step_ns || (ns == best.step_ns && g.size() < best.ends.size())) {
            best = WrapChoice{true, g, ns, m.peakBytes(g)};
        }
    }
    return best;
}

TEST(WrapSearchTest, AllGroupingsOfFourBlocks) {
    const auto all = allGroupings(4);
    ASSERT_EQ(all.size(), 8u);
    EXPECT_EQ(all.front(), (Grouping{4}));
    EXPECT_EQ(all.back(), (Grouping{1, 2, 3, 4}));
}

TEST(WrapSearchTest, DynamicProgramMatchesBruteForce) {
    for (double latency : {5e-6, 1e-4, 1e-3}) {
        const WrapCostModel m(toyInputs(), h100Profile(latency));
        const WrapChoice dp = m.best(std::numeric_limits<int64_t>::max());
        const WrapChoice brute = bruteForce(m, std::numeric_limits<int64_t>::max());
        ASSERT_TRUE(dp.found);
        EXPECT_EQ(dp.ends, brute.ends) << "latency " << latency;
        EXPECT_DOUBLE_EQ(dp.step_ns, brute.step_ns);
    }
}

// Every memory term (two all-gathers ahead at the turn into the backward, ZeRO-2's held units)
// stays a function of one pair: under caps between the smallest and the largest peak, the DP
// finds the brute-force optimum.
TEST(WrapSearchTest, DynamicProgramMatchesBruteForceUnderCaps) {
    for (int ahead : {1, 2}) {
        for (bool reshard : {true, false}) {
            WrapCostInputs in = toyInputs();
            in.backward_gathers_ahead = ahead;
            in.reshard_after_forward = reshard;
            const WrapCostModel m(std::move(in), h100Profile(1e-3));
            int64_t lowest = std::numeric_limits<int64_t>::max(), highest = 0;
            for (const Grouping& g : allGroupings(m.blockCount())) {
                lowest = std::min(lowest, m.peakBytes(g));
                highest = std::max(highest, m.peakBytes(g));
            }
            ASSERT_LT(lowest, highest);
            for (int step = 0; step <= 4; ++step) {
                const int64_t cap = lowest + (highest - lowest) * step / 4;
                const WrapChoice dp = m.best(cap);
                const WrapChoice brute = bruteForce(m, cap);
                ASSERT_TRUE(dp.found);
                EXPECT_EQ(dp.ends, brute.ends) << "ahead " << ahead << " reshard " << reshard << " cap " << cap;
                EXPECT_DOUBLE_EQ(dp.step_ns, brute.step_ns);
                EXPECT_EQ(dp.peak_bytes, m.peakBytes(dp.ends));
            }
        }
    }
}

TEST(WrapSearchTest, TightCapForcesSmallerUnits) {
    const WrapCostModel m(toyInputs(), h100Profile(1e-3));
    const WrapChoice free = m.best(std::numeric_limits<int64_t>::max());
    ASSERT_TRUE(free.found);
    // With 1 ms per collective, few large units are fastest (the last block alone lets its
    // all-gather hide under the root's output layers).
    EXPECT_LE(free.ends.size(), 2u);
    // A cap just above the per-block peak rules the large units out.
    const Grouping per_block{1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t cap = m.peakBytes(per_block) + core::kMiB;
    ASSERT_LT(cap, free.peak_bytes);
    const WrapChoice capped = m.best(cap);
    ASSERT_TRUE(capped.found);
    EXPECT_LE(capped.peak_bytes, cap);
    EXPECT_GT(capped.ends.size(), free.ends.size());
    const WrapChoice brute = bruteForce(m, cap);
    EXPECT_EQ(capped.ends, brute.ends);
    EXPECT_DOUBLE_EQ(capped.step_ns, brute.step_ns);
    // Below every grouping's peak nothing is found.
    EXPECT_FALSE(m.best(m.inputs().base_bytes).found);
}

TEST(WrapSearchTest, GroupingStringAndPolicy) {
    EXPECT_EQ(groupingString({4, 10}), "[0-3][4-9]");
    EXPECT_EQ(groupingString({7, 8}), "[0-6][7]");
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    Grouping g{2};
    for (int e = 3; e <= 32; ++e) g.push_back(e);
    const core::WrapPolicy w = groupingPolicy(*model, g);
    EXPECT_EQ(w.kind, core::WrapKind::Modules);
    ASSERT_EQ(w.modules.size(), 31u);
    EXPECT_EQ(w.modules[0], "model.layers.0+model.layers.1");
    EXPECT_EQ(w.modules[1], "model.layers.2");
}

TEST(WrapSearchTest, ModelReproducesThePerBlockSimulation) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    auto result = searchWrap(plan, profile, WrapSearchOptions{});
    ASSERT_TRUE(result.ok()) << result.error().message;
    EXPECT_TRUE(result->fits);
    EXPECT_LE(result->full.peak_bytes, result->cap_bytes);
    EXPECT_EQ(result->ends.back(), 32);
    // The search never does worse than its own calibration point when that fits.
    if (result->per_block.peak_bytes <= result->cap_bytes) {
        EXPECT_LE(result->full.step_s, result->per_block.step_s * 1.001);
    }
}

// no_sync keeps every unit's unsharded gradients across micro-batches: the model counts them,
// so its first choice already fits under the full simulation (no tightening round).
TEST(WrapSearchTest, NoSyncGradientsAreInTheMemoryModel) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.training.grad_accum = 3;
    plan.training.no_sync = true;
    plan.training.ac = core::Checkpointing::Full;
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    WrapSearchOptions allocated_only;  // the cost model's figure is the allocated peak
    allocated_only.reserved_memory = false;
    auto result = searchWrap(plan, profile, allocated_only);
    ASSERT_TRUE(result.ok()) << result.error().message;
    EXPECT_TRUE(result->fits);
    EXPECT_EQ(result->tightenings, 0);
    EXPECT_GE(result->predicted_peak_bytes, result->full.peak_bytes);
    // 8.03e9 fp32 gradients held on every rank: well above the sharded states alone.
    EXPECT_GT(result->full.peak_bytes, int64_t{8'030'261'248} * 4);
}

core::Plan llama8bOnEightH100(int fsdp_version) {
    auto model = core::resolveModel("llama-3.1-8b");
    EXPECT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.sharding.fsdp_version = fsdp_version;
    return plan;
}

// The timed peak of the full lowering and simulation of `plan` wrapped as `ends`.
int64_t simulatedPeak(const core::Plan& plan, const Grouping& ends, const HardwareProfile& profile) {
    core::Plan wrapped = plan;
    wrapped.sharding.wrap = groupingPolicy(*plan.model, ends);
    auto e = evaluatePlan(wrapped, &profile);
    EXPECT_TRUE(e.ok()) << e.error().message;
    return e.ok() ? e->timed.peak_bytes : 0;
}

Grouping perBlockGrouping(int blocks) {
    Grouping g;
    for (int e = 1; e <= blocks; ++e) g.push_back(e);
    return g;
}

// The model's peak against the full simulation's timed peak, Llama-3.1-8B on 8 x H100, for the
// per-block grouping, the search's choice in the issue ([0][1-3][4-13][14-31]), two halves and
// one unit. While the search pattern-matched the Program's tasks it said, per block and for the
// issue's grouping, 49.74 and 52.07 GB against 50.67 and 62.32 GB simulated for FSDP1 (it took
// the copy-in's _mp_shard for the all-gather buffer) and 49.74 and 65.81 GB against 50.18 and
// 59.00 GB for FSDP2. At these peaks the pair terms list every buffer the timed curve holds,
// so FSDP2 agrees to the byte (1 MiB of slack). FSDP1 per block is low by exactly one block's
// _mp_shard (its parameters / W, W = 8): the copy-in of a third backward all-gather, issued
// early, which no pair sees.
class ModelPeakTest : public ::testing::TestWithParam<int> {};

TEST_P(ModelPeakTest, MatchesTheSimulatedPeak) {
    const int fsdp = GetParam();
    const core::Plan plan = llama8bOnEightH100(fsdp);
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    auto model = WrapCostModel::fromPlan(plan, profile);
    ASSERT_TRUE(model.ok()) << model.error().message;
    // FSDP1's all-gathers wait for no copy-out: two run ahead at the turn into the backward.
    EXPECT_EQ(model->inputs().backward_gathers_ahead, fsdp == 1 ? 2 : 1);
    const int64_t mp_shard = model->inputs().blocks[0].unsharded_bytes / 8;
    const int64_t slack = fsdp == 1 ? mp_shard + core::kMiB : core::kMiB;
    for (const Grouping& g : {perBlockGrouping(32), Grouping{1, 4, 14, 32}, Grouping{16, 32}, Grouping{32}}) {
        const int64_t simulated = simulatedPeak(plan, g, profile);
        const int64_t modelled = model->peakBytes(g);
        EXPECT_LE(modelled, simulated + core::kMiB) << groupingString(g);
        EXPECT_LE(simulated, modelled + slack) << groupingString(g);
    }
}

INSTANTIATE_TEST_SUITE_P(Fsdp, ModelPeakTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& p) { return "Fsdp" + std::to_string(p.param); });

// Per block, the pairs cover the peak for the other ways FSDP2 holds memory too: activation
// checkpointing, ZeRO-2 (every unit held to its backward), HSDP, reshard_after_forward=k slices,
// and sharded gradients kept across micro-batches that all reduce.
TEST(WrapSearchTest, PerBlockPeakMatchesTheSimulationAcrossStrategies) {
    struct Case {
        const char* name;
        core::Strategy strategy;
        int nodes;
        int reshard_to;
        int64_t grad_accum;
    };
    const Case cases[] = {{"full shard", core::Strategy::FullShard, 1, 0, 1},
                          {"shard grad op", core::Strategy::ShardGradOp, 1, 0, 1},
                          {"hybrid shard", core::Strategy::HybridShard, 2, 0, 1},
                          {"reshard to 8", core::Strategy::FullShard, 2, 8, 1},
                          {"two micro-batches", core::Strategy::FullShard, 1, 0, 2}};
    for (const Case& c : cases) {
        core::Plan plan = llama8bOnEightH100(2);
        plan.training.ac = core::Checkpointing::Full;
        plan.training.grad_accum = c.grad_accum;
        plan.cluster.nodes = c.nodes;
        plan.sharding.strategy = c.strategy;
        if (c.reshard_to > 0) {
            plan.sharding.reshard_after_forward = core::ReshardMode::Count;
            plan.sharding.reshard_after_forward_k = c.reshard_to;
        }
        const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
        auto model = WrapCostModel::fromPlan(plan, profile);
        ASSERT_TRUE(model.ok()) << c.name << ": " << model.error().message;
        const Grouping per_block = perBlockGrouping(32);
        EXPECT_NEAR(static_cast<double>(model->peakBytes(per_block)),
                    static_cast<double>(simulatedPeak(plan, per_block, profile)), static_cast<double>(core::kMiB))
            << c.name;
    }
}

// FSDP1's all-gather buffer is its unsharded FlatParameter: with it in the model, the search's
// first choice for FSDP1 fits, and its predicted peak is the simulated one less at most the
// _mp_shard of a third unit copied in early (1/W of a unit's parameters, W = 8).
TEST(WrapSearchTest, Fsdp1SearchPredictsTheSimulatedPeak) {
    const core::Plan plan = llama8bOnEightH100(1);
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    WrapSearchOptions allocated_only;  // the cost model's figure is the allocated peak
    allocated_only.reserved_memory = false;
    auto result = searchWrap(plan, profile, allocated_only);
    ASSERT_TRUE(result.ok()) << result.error().message;
    EXPECT_TRUE(result->fits);
    EXPECT_EQ(result->tightenings, 0);
    auto model = WrapCostModel::fromPlan(plan, profile);
    ASSERT_TRUE(model.ok());
    int64_t largest_unit = 0;
    int32_t lo = 0;
    for (int32_t hi : result->ends) {
        int64_t unit = 0;
        for (int32_t b = lo; b < hi; ++b) unit += model->inputs().blocks[static_cast<size_t>(b)].unsharded_bytes;
        largest_unit = std::max(largest_unit, unit);
        lo = hi;
    }
    EXPECT_LE(result->predicted_peak_bytes, result->full.peak_bytes);
    EXPECT_LE(result->full.peak_bytes, result->predicted_peak_bytes + largest_unit / 8);
}

// What runs out is the caching allocator's reserved memory. Llama-3.1-8B on 8 H100 at 4,096
// tokens: the grouping the cost model prefers on allocated bytes allocates ~54 GiB, but its large
// units' all-gather and reduce-scatter buffers sit in per-stream pools, and replayed through the
// allocator it is at risk; the search judges on reserved memory and returns a grouping that fits
// there. At 8,192 tokens even one unit per block reserves more than the cap: nothing fits, where
// the allocated peak alone (75.41 GiB under a 75.67 GiB cap) said it did.
TEST(WrapSearchTest, JudgesTheChoiceOnReservedMemory) {
    core::Plan plan = llama8bOnEightH100(2);
    plan.training.seq_len = 4096;
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    WrapSearchOptions allocated_only;
    allocated_only.reserved_memory = false;
    auto on_allocated = searchWrap(plan, profile, allocated_only);
    ASSERT_TRUE(on_allocated.ok()) << on_allocated.error().message;
    ASSERT_TRUE(on_allocated->fits);
    EXPECT_EQ(on_allocated->full.reserved_bytes, 0);  // not replayed
    core::Plan chosen = plan;
    chosen.sharding.wrap = on_allocated->wrap;
    auto e = evaluatePlan(chosen, &profile);
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(e->fit.fits) << "the allocated-only choice is no longer at risk: pick a plan where it is";

    auto on_reserved = searchWrap(plan, profile, WrapSearchOptions{});
    ASSERT_TRUE(on_reserved.ok()) << on_reserved.error().message;
    ASSERT_TRUE(on_reserved->fits);
    EXPECT_GT(on_reserved->full.reserved_bytes, on_reserved->full.peak_bytes);
    EXPECT_LE(on_reserved->full.reserved_bytes, on_reserved->cap_bytes);
    EXPECT_FALSE(on_reserved->full.at_risk);
    EXPECT_GT(on_reserved->tightenings, 0);
    chosen.sharding.wrap = on_reserved->wrap;
    auto again = evaluatePlan(chosen, &profile);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->fit.fits);
    EXPECT_EQ(again->fit.reserved_bytes, on_reserved->full.reserved_bytes);

    plan.training.seq_len = 8192;
    auto long_allocated = searchWrap(plan, profile, allocated_only);
    ASSERT_TRUE(long_allocated.ok());
    EXPECT_TRUE(long_allocated->fits);
    auto long_reserved = searchWrap(plan, profile, WrapSearchOptions{});
    ASSERT_TRUE(long_reserved.ok());
    EXPECT_FALSE(long_reserved->fits);
    EXPECT_GT(long_reserved->per_block.reserved_bytes, long_reserved->cap_bytes);
    EXPECT_NE(long_reserved->message.find("reserves"), std::string::npos) << long_reserved->message;
}

TEST(PytorchCodeTest, PythonAttributeAccess) {
    EXPECT_EQ(pythonModuleExpr("model.layers.17"), "model.model.layers[17]");
    EXPECT_EQ(pythonModuleExpr("transformer.h.0.mlp"), "model.transformer.h[0].mlp");
    EXPECT_EQ(pythonModuleExpr(""), "model");
}

TEST(PytorchCodeTest, TwoUnitGrouping) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = 8;
    core::Mesh mesh{8, 8, 1, 1, 1, 1, {}};
    const std::string code = pytorchCode(plan, mesh, {{"model.layers.0", "model.layers.1"}, {"model.layers.2"}});
    EXPECT_EQ(code,
              "# shardcast: FULL_SHARD on 1 x H100-SXM (8 GPUs)\n"
              "import torch\n"
              "from torch.distributed.device_mesh import init_device_mesh\n"
              "from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy\n"
              "\n"
              "mesh = init_device_mesh(\"cuda\", (8,), mesh_dim_names=(\"shard\",))\n"
              "mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
              "fully_shard(list(model.model.layers[0:2]), mesh=mesh, mp_policy=mp, reshard_after_forward=True)\n"
              "fully_shard(model.model.layers[2], mesh=mesh, mp_policy=mp, reshard_after_forward=True)\n"
              "fully_shard(model, mesh=mesh, mp_policy=mp)\n");
}

// Consecutive ModuleList entries become a slice; anything else a list of modules.
TEST(PytorchCodeTest, NonConsecutiveModulesAreListed) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    core::Mesh mesh{8, 8, 1, 1, 1, 1, {}};
    const std::string code = pytorchCode(plan, mesh, {{"model.layers.0", "model.layers.2"}, {"model.norm", "lm_head"}});
    EXPECT_NE(code.find("fully_shard([model.model.layers[0], model.model.layers[2]], mesh=mesh"), std::string::npos);
    EXPECT_NE(code.find("fully_shard([model.model.norm, model.lm_head], mesh=mesh"), std::string::npos);
}

TEST(PytorchCodeTest, HybridUsesATwoDimensionalMesh) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = 2;
    plan.sharding.strategy = core::Strategy::HybridShard;
    const std::string code = pytorchCode(plan, core::Mesh{16, 8, 2, 1, 1, 1, {}}, {{"model.layers.0"}});
    EXPECT_NE(code.find("mesh = init_device_mesh(\"cuda\", (2, 8), mesh_dim_names=(\"replicate\", \"shard\"))\n"),
              std::string::npos)
        << code;
}

// Checkpointing per block: each run of consecutive blocks in one mode is one loop of
// checkpoint_wrapper calls before fully_shard (full: plain; op: torchtitan's per-op SAC policy);
// blocks in none are left alone.
TEST(PytorchCodeTest, PerBlockCheckpointingWrapsEachRunInItsMode) {
    auto model = core::resolveModel("llama-3.1-8b");
    ASSERT_TRUE(model.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    auto spec = core::parseAcSpec("blocks:full*8,op*1,none*23");
    ASSERT_TRUE(spec.has_value());
    core::applyAc(plan.training, *spec);
    const std::string code = pytorchCode(plan, core::Mesh{8, 8, 1, 1, 1, 1, {}}, {{"model.layers.0"}});
    EXPECT_NE(code.find("# Activation checkpointing (blocks:full*8,op*1,none*23), before fully_shard\n"), std::string::npos)
        << code;
    EXPECT_NE(code.find("for i in range(0, 8):\n    model.model.layers[i] = checkpoint_wrapper(model.model.layers[i], "
                        "preserve_rng_state=False)\n"),
              std::string::npos)
        << code;
    EXPECT_NE(code.find("model.model.layers[8] = checkpoint_wrapper(model.model.layers[8], context_fn=_op_sac_context, "
                        "preserve_rng_state=False)\n"),
              std::string::npos)
        << code;
    EXPECT_EQ(code.find("layers[9]"), std::string::npos) << code;
    EXPECT_NE(code.find("def _op_sac_context():"), std::string::npos) << code;
    // Wrapped before the first fully_shard call.
    EXPECT_LT(code.find("checkpoint_wrapper(model.model.layers[8]"), code.find("fully_shard(model.model.layers[0]"));
    // No checkpointing: no wrapper.
    plan.training = core::TrainingSpec{};
    EXPECT_EQ(pytorchCode(plan, core::Mesh{8, 8, 1, 1, 1, 1, {}}, {{"model.layers.0"}}).find("checkpoint_wrapper"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::sim
