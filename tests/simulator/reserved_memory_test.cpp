// Reserved memory on lowered plans: the caching allocator model (core/memory/caching_allocator.hpp)
// replayed by the evaluation over the timed events, and "fits" judged on it (core/memory/fit.hpp).
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/test_plan.hpp"

namespace shardcast::sim {
namespace {

core::Plan planOf(const char* model, core::Strategy strategy) {
    core::Plan plan = testing::h100Plan(model, 2, 2048);
    plan.sharding.strategy = strategy;
    return plan;
}

int64_t overhead(const Evaluation& e) { return e.program.initial[core::index(core::MemCategory::RuntimeOverhead)]; }

TEST(ReservedMemoryTest, ReservedCoversAllocatedForEveryStrategy) {
    const core::Strategy strategies[] = {core::Strategy::NoShard, core::Strategy::ShardGradOp, core::Strategy::FullShard,
                                         core::Strategy::HybridShard, core::Strategy::HybridShardZero2};
    Evaluator evaluator;
    Evaluation e;
    for (core::Strategy s : strategies) {
        for (core::AllocatorMode mode : {core::AllocatorMode::Caching, core::AllocatorMode::Expandable}) {
            core::Plan plan = planOf("tiny-llama", s);
            plan.training.allocator = mode;
            const std::string what = std::string(core::strategyName(s)) + " " + std::string(allocatorModeName(mode));
            ASSERT_TRUE(evaluator.evaluate(plan, nullptr, EvaluationOptions{}, e).ok()) << what;
            const core::AllocatorStats& a = e.reserved.stats;
            EXPECT_EQ(e.reserved.config.mode, mode) << what;
            // The allocator sees the same bytes at the same moments as the timed curve.
            EXPECT_EQ(a.peak_allocated_bytes + overhead(e), e.timed.peak_bytes) << what;
            EXPECT_GE(a.peak_reserved_bytes, a.peak_allocated_bytes) << what;
            EXPECT_GT(a.peak_reserved_bytes, 0) << what;
            // Segments are 2 MiB multiples (kSmallBuffer, kLargeBuffer, kRoundLarge; 2 and 20 MiB pages).
            EXPECT_EQ(a.peak_reserved_bytes % (int64_t{2} << 20), 0) << what;
            EXPECT_FALSE(a.out_of_memory) << what;
            EXPECT_EQ(e.fit.reserved_bytes, a.peak_reserved_bytes + overhead(e)) << what;  // overhead once
            EXPECT_TRUE(e.fit.fits) << what;
        }
    }
}

TEST(ReservedMemoryTest, FitsOnAllocatedButNotOnReservedIsAtRisk) {
    core::Plan plan = planOf("llama-3.1-8b", core::Strategy::FullShard);
    Evaluator evaluator;
    Evaluation e;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, EvaluationOptions{}, e).ok());
    const int64_t allocated = e.fit.peak_bytes;
    const int64_t reserved = e.fit.reserved_bytes;
    ASSERT_GT(reserved, allocated);
    // A headroom that puts the budget halfway between the two peaks (the headroom does not change
    // what the allocator may reserve, so the peaks stay).
    const double capacity = static_cast<double>(e.fit.capacity_bytes);
    EvaluationOptions options;
    options.headroom = 1.0 - (static_cast<double>(allocated + reserved) / 2.0) / capacity;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    EXPECT_EQ(e.fit.peak_bytes, allocated);
    EXPECT_EQ(e.fit.reserved_bytes, reserved);
    EXPECT_FALSE(e.fit.fits);
    EXPECT_TRUE(e.fit.at_risk);
    EXPECT_EQ(e.fit.marginBytes(), reserved - e.fit.budget_bytes);

    // Judged on allocated bytes alone (the model off), the same budget fits.
    options.reserved_memory = false;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    EXPECT_TRUE(e.fit.fits);
    EXPECT_FALSE(e.fit.at_risk);
    EXPECT_EQ(e.fit.reserved_bytes, 0);
}

TEST(ReservedMemoryTest, OverBothBudgetsDoesNotFitAndIsNotAtRisk) {
    core::Plan plan = planOf("llama-3.1-8b", core::Strategy::FullShard);
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    options.headroom = 1.0 - static_cast<double>(e.fit.peak_bytes / 2) / static_cast<double>(e.fit.capacity_bytes);
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    EXPECT_FALSE(e.fit.fits);
    EXPECT_FALSE(e.fit.at_risk);
}

// FSDP2 allocates each parameter's unsharded tensor on its own (foreach_all_gather_copy_out in
// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), and autograd each saved tensor: the
// Program lists them behind their buffers, so the allocator places them one by one. A Llama
// block has 9 parameters (q, k, v, o, gate, up, down, two RMSNorm weights).
TEST(ReservedMemoryTest, BuffersListTheTensorsPyTorchAllocates) {
    core::Plan plan = planOf("llama-3.1-8b", core::Strategy::FullShard);
    Evaluator evaluator;
    Evaluation e;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, EvaluationOptions{}, e).ok());
    const core::Program& p = e.program;
    ASSERT_EQ(p.buffer_tensors.size(), static_cast<size_t>(p.buffer_count));
    int unsharded = 0, saved = 0;
    for (const core::MemEvent& m : p.mem) {
        if (m.bytes <= 0 || m.timed_after >= 0) continue;
        const core::Span ts = p.buffer_tensors[static_cast<size_t>(m.buffer)];
        int64_t sum = 0;
        for (uint32_t k = 0; k < ts.count; ++k) sum += p.tensor_bytes[ts.offset + k];
        if (ts.count > 0) {
            EXPECT_EQ(sum, m.bytes);
        }
        if (m.category == core::MemCategory::UnshardedParam && ts.count == 9) ++unsharded;
        if (m.category == core::MemCategory::Activation && ts.count > 1) ++saved;
    }
    // 32 blocks, unsharded in the forward and again in the backward.
    EXPECT_EQ(unsharded, 64);
    EXPECT_GE(saved, 32);  // every block's saved activations (no checkpointing)
}

// At 99% of the card allocated (no headroom), the cache cannot hold the step's fragmentation:
// the allocator reaches the device's memory and must free its cache (or fails), so the plan is at
// risk, not fitting; on a card 1 GiB larger than the reserved peak it fits.
TEST(ReservedMemoryTest, NinetyNinePercentAllocatedIsAtRisk) {
    core::Plan plan = planOf("llama-3.1-8b", core::Strategy::FullShard);
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    options.headroom = 0.0;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    ASSERT_TRUE(e.fit.fits);  // on the 80 GB card, with room for its cache
    const int64_t allocated = e.fit.peak_bytes;
    const int64_t reserved = e.fit.reserved_bytes;
    ASSERT_GT(static_cast<double>(reserved), static_cast<double>(allocated) / 0.99);
    plan.cluster.gpu.memory_bytes = static_cast<int64_t>(static_cast<double>(allocated) / 0.99);
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    ASSERT_EQ(e.fit.peak_bytes, allocated);
    EXPECT_FALSE(e.fit.fits);
    EXPECT_TRUE(e.fit.at_risk);
    EXPECT_TRUE(e.fit.cache_flushed);

    plan.cluster.gpu.memory_bytes = reserved + (int64_t{1} << 30);
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, options, e).ok());
    EXPECT_EQ(e.fit.reserved_bytes, reserved);
    EXPECT_TRUE(e.fit.fits);
    EXPECT_FALSE(e.fit.at_risk);
    EXPECT_FALSE(e.fit.cache_flushed);
}

// The README example (examples/llama-3.1-8b-8xh100.json: FSDP2 FULL_SHARD per block on 8 H100,
// sequence 8,192, every second block checkpointed, bf16 params, fp32 reduce and master). Its
// allocated peak is the loss's backward, before any reduce-scatter. FSDP2's foreach_reduce
// allocates the reduce-scatter input on the compute stream and the output, which is the fp32
// sharded gradient, on the reduce-scatter stream; zero_grad frees the gradients, so at that
// peak the reduce-scatter stream caches the previous step's sharded gradients, idle, and
// nothing else (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). The all-gather
// outputs sit in the copy-in stream's pool (foreach_all_gather). Each stream reuses only its
// own blocks, so reserved >= compute in use + the sharded gradients + the all-gather outputs at
// their most, whatever the allocator setting: more than 10% above allocated for this plan.
// torchtitan runs with expandable_segments:True (run_train.sh, PYTORCH_ALLOC_CONF), where the
// compute stream's pool holds its in-use bytes to within 1%.
TEST(ReservedMemoryTest, ReadmeExampleCachesPerStream) {
    core::Plan plan = planOf("llama-3.1-8b", core::Strategy::FullShard);
    plan.cluster.nodes = 1;
    plan.training.seq_len = 8192;
    plan.training.ac = core::Checkpointing::Layer;
    plan.training.ac_every = 2;
    plan.training.reduce_dtype = core::DType::F32;
    plan.training.master_dtype = core::DType::F32;
    const auto rs = static_cast<size_t>(core::Stream::ReduceScatter);
    const auto compute = static_cast<size_t>(core::Stream::Compute);
    const auto copy_in = static_cast<size_t>(core::Stream::AllGatherCopyIn);
    Evaluator evaluator;
    Evaluation e;
    for (core::AllocatorMode mode : {core::AllocatorMode::Caching, core::AllocatorMode::Expandable}) {
        plan.training.allocator = mode;
        const std::string what(allocatorModeName(mode));
        ASSERT_TRUE(evaluator.evaluate(plan, nullptr, EvaluationOptions{}, e).ok()) << what;
        const core::AllocatorStats& a = e.reserved.stats;
        const int64_t sharded_grads = e.timed.max_per_category[core::index(core::MemCategory::ShardedGrad)];
        const int64_t all_gather = e.timed.max_per_category[core::index(core::MemCategory::AllGather)];
        // 8,030,261,248 params / 8 ranks (padded per parameter) x 4 B: 3.74 GiB.
        EXPECT_NEAR(static_cast<double>(sharded_grads) / (1 << 30), 3.74, 0.01) << what;
        EXPECT_EQ(a.allocated_by_stream_at_peak[rs], 0) << what;
        EXPECT_GE(a.reserved_by_stream_at_peak[rs], sharded_grads) << what;
        // Only the gradients (each unit's segment rounded up to 2 MiB or a 20 MiB page): with the
        // input there too, the root unit's 3.9 GiB fp32 input alone would double it.
        EXPECT_LT(a.reserved_by_stream_at_peak[rs], sharded_grads + sharded_grads / 20) << what;
        EXPECT_GE(a.reserved_by_stream_at_peak[copy_in], all_gather) << what;
        const int64_t floor = a.allocated_by_stream_at_peak[compute] + sharded_grads + all_gather;
        EXPECT_GE(a.peak_reserved_bytes, floor) << what;
        EXPECT_GT(static_cast<double>(floor) / static_cast<double>(a.peak_allocated_bytes), 1.10) << what;
    }
    const core::AllocatorStats& x = e.reserved.stats;  // expandable
    EXPECT_LT(static_cast<double>(x.reserved_by_stream_at_peak[compute]),
              1.01 * static_cast<double>(x.allocated_by_stream_at_peak[compute]));
}

}  // namespace
}  // namespace shardcast::sim
