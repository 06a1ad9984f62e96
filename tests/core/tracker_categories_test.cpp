// Bytes filed under the categories PyTorch's FSDPMemTracker files them under
// (torch/distributed/_tools/fsdp2_mem_tracker.py and mem_tracker.py), and the transformers mask
// knob, on lowered programs with sizes worked out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "core/memory/memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "lowered_program.hpp"

using namespace shardcast::core;
using shardcast::core::testing::lowered;

namespace {

constexpr int64_t kRows = 64, kCols = 32, kTokens = 128;

// Two blocks, one [64, 32] weight and one matmul each, saving 32 and holding 100 bf16 elements of
// forward transients and 10 of backward transients per token; the root owns no parameter.
std::shared_ptr<Model> toyModel() {
    auto m = std::make_shared<Model>();
    m->name = "toy";
    m->modules.push_back(Module{"", -1, false, false});
    m->modules.push_back(Module{"layers", 0, true, false});
    for (int b = 0; b < 2; ++b) {
        const auto block = static_cast<int32_t>(m->modules.size());
        m->modules.push_back(Module{"layers." + std::to_string(b), 1, false, true});
        m->blocks.push_back(block);
        m->params.push_back(Param{"layers." + std::to_string(b) + ".weight", {kRows, kCols}, block, std::nullopt});
        Op op;
        op.name = "matmul";
        op.module = block;
        op.kind = OpKind::Matmul;
        op.flops.per_token = 2.0 * kRows * kCols;
        op.bwd_flops_factor = 2;
        op.saved_act.per_token = kCols;
        op.temp_act.per_token = 100;
        op.bwd_temp_act.per_token = 10;
        m->ops.push_back(op);
    }
    return m;
}

Plan fullShard(std::shared_ptr<const Model> model, int gpus, int64_t seq) {
    Plan plan;
    plan.model = std::move(model);
    plan.model_ref = plan.model->name;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = gpus;
    plan.training.micro_batch = 1;
    plan.training.seq_len = seq;
    plan.sharding.strategy = Strategy::FullShard;
    return plan;
}

// Bytes of one category among a span of a task's memory events (+ allocations only).
int64_t allocated(const Program& p, const Span& span, MemCategory c) {
    int64_t sum = 0;
    for (uint32_t i = span.offset; i < span.offset + span.count; ++i) {
        const MemEvent& e = p.mem[i];
        if (e.category == c && e.bytes > 0) sum += e.bytes;
    }
    return sum;
}

}  // namespace

TEST(TrackerCategoriesTest, ForwardTransientsAreActivation) {
    // MemTracker.__torch_dispatch__: outside backward and the optimizer, reftype = ACT. A block's
    // forward peak: 32 saved + 100 transient bf16 elements per token = 264 bytes * 128 tokens.
    const Program p = lowered(fullShard(toyModel(), 2, kTokens));
    int forwards = 0;
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::Forward) continue;
        ++forwards;
        EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::Activation), 264 * kTokens);
        EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::Temp), 0);
    }
    EXPECT_EQ(forwards, 2);
}

TEST(TrackerCategoriesTest, GradientsBeingMadeAreTemp) {
    // Backward: bf16 weight gradient 64 * 32 * 2 = 4,096 bytes and 10 bf16 transients per token
    // (2,560 bytes) are TEMP (is_bw); FSDPMemTracker moves the gradient to Unsharded Grad only in
    // _fsdp_param_group_post_backward.
    const Program p = lowered(fullShard(toyModel(), 2, kTokens));
    int backwards = 0;
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::Backward) continue;
        ++backwards;
        EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::Temp), kRows * kCols * 2 + 10 * 2 * kTokens);
        EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::UnshardedGrad), 0);
    }
    EXPECT_EQ(backwards, 2);
}

TEST(TrackerCategoriesTest, ShardCastIsFiledByPhaseAndAdamWTemporaryIsOptState) {
    // FSDP2's copy-in casts the fp32 shard (32 of 64 rows on 2 ranks) to bf16: 32 * 32 * 2 =
    // 2,048 bytes, not a collective's buffer (only _allgather_base_'s output is ALL_GATHER):
    // ACT before forward, TEMP before backward.
    const Program p = lowered(fullShard(toyModel(), 2, kTokens));
    int fwd_copy_ins = 0, bwd_copy_ins = 0;
    for (const Task& t : p.tasks) {
        if (t.kind == TaskKind::CopyIn) {
            const int64_t act = allocated(p, t.mem_peak, MemCategory::Activation);
            const int64_t temp = allocated(p, t.mem_peak, MemCategory::Temp);
            if (act + temp == 0) continue;  // a copy-in with nothing to cast (the parameterless root)
            EXPECT_EQ(act + temp, 32 * kCols * 2);
            EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::AllGather), 0);
            fwd_copy_ins += act > 0;
            bwd_copy_ins += temp > 0;
        }
        if (t.kind == TaskKind::OptimizerStep) {
            // foreach AdamW's one parameter-sized fp32 temporary, allocated in the optimizer
            // (reftype OPT): 2 shards of 32 * 32 fp32 = 8,192 bytes.
            EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::OptState), 2 * 32 * kCols * 4);
            EXPECT_EQ(allocated(p, t.mem_peak, MemCategory::Temp), 0);
        }
    }
    EXPECT_EQ(fwd_copy_ins, 2);  // one gather per block in forward
    EXPECT_GE(bwd_copy_ins, 2);  // every block is resharded after forward and gathered again
}

TEST(TrackerCategoriesTest, Transformers45MaskAddsSavedBytesPerLayer) {
    // Llama-3.1-8B at b = 1, s = 2048 (tests/core/activation_test.cpp): 4.5x saves
    // 2 * 2048 * (6144 + 2048) = 33,554,432 bytes more per layer, 32 layers: 1,073,741,824.
    auto model = loadModelFile(std::filesystem::path(SHARDCAST_SOURCE_DIR) / "models" / "llama-3.1-8b.json");
    ASSERT_TRUE(model.ok());
    auto shared = std::make_shared<const Model>(std::move(model).value());
    auto activation = [&](HfMask mask) {
        Plan plan = fullShard(shared, 8, 2048);
        plan.training.hf_mask = mask;
        const Program p = lowered(plan);
        int64_t saved = 0;
        for (const Task& t : p.tasks)
            if (t.kind == TaskKind::Forward) saved += allocated(p, t.mem_end, MemCategory::Activation);
        return saved;
    };
    EXPECT_EQ(activation(HfMask::V4) - activation(HfMask::V5), 1'073'741'824);
}

TEST(TrackerCategoriesTest, GradientsAreUnshardedGradFromTheUnitsPostBackward) {
    // FSDPMemTracker._fsdp_param_group_post_backward (fsdp2_mem_tracker.py) files each
    // _unsharded_param.grad as Unsharded Grad before FSDP2's post_backward runs: each block's bf16
    // weight gradient, 64 * 32 * 2 = 4,096 bytes, is made as Temp and moved to Unsharded Grad at
    // the end of the block's (only, hence last) backward task.
    const Program p = lowered(fullShard(toyModel(), 2, kTokens));
    int backwards = 0;
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::Backward) continue;
        ++backwards;
        EXPECT_EQ(allocated(p, t.mem_end, MemCategory::Temp), kRows * kCols * 2);
        EXPECT_EQ(allocated(p, t.mem_end, MemCategory::UnshardedGrad), kRows * kCols * 2);
    }
    EXPECT_EQ(backwards, 2);
}

TEST(TrackerCategoriesTest, ReduceScatterInputIsTempUntilTheCollective) {
    // FSDP2's foreach_reduce allocates the fp32 reduce-scatter input with torch.empty in backward
    // (TEMP) and copies the gradients into it; only _reduce_scatter_base_ makes it REDUCE_SCATTER
    // (fsdp2_mem_tracker.py, __torch_dispatch__). Each block: 64 rows on 2 ranks, no padding,
    // 64 * 32 * 4 = 8,192 bytes, held next to the 4,096-byte bf16 gradient at the copy-in.
    const Program p = lowered(fullShard(toyModel(), 2, kTokens));
    MemoryReport report;
    replayMemory(p, report, /*record_curve=*/true);
    int copy_ins = 0, reductions = 0;
    for (size_t i = 0; i < report.curve.size(); ++i) {
        const MemorySample& s = report.curve[i];
        if (s.task < 0 || p.tasks[static_cast<size_t>(s.task)].kind != TaskKind::ReduceScatter) continue;
        const auto& b = s.bytes;
        if (b[index(MemCategory::Temp)] == 8192 && b[index(MemCategory::UnshardedGrad)] == 4096 &&
            b[index(MemCategory::ReduceScatter)] == 0)
            ++copy_ins;
        if (b[index(MemCategory::ReduceScatter)] >= 8192 && b[index(MemCategory::UnshardedGrad)] == 0 &&
            b[index(MemCategory::Temp)] == 0)
            ++reductions;
    }
    EXPECT_EQ(copy_ins, 2);
    EXPECT_GE(reductions, 2);
}
