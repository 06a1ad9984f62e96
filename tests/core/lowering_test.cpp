// FSDP semantics of the lowering and the memory replay, against figures worked out by hand or
// taken from the ZeRO paper (Rajbhandari et al., SC'20) and tests/data/reference-cases.json.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/lower/lower.hpp"
#include "core/memory/memory.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

using namespace shardcast::core;

namespace {

// A model of `blocks` blocks, each one weight of [rows, cols] and one matmul; the root owns no
// parameter, so every parameter is re-gathered in backward under FULL_SHARD.
std::shared_ptr<Model> toyModel(int blocks, int64_t rows, int64_t cols) {
    auto m = std::make_shared<Model>();
    m->name = "toy";
    m->modules.push_back(Module{"", -1, false, false});
    m->modules.push_back(Module{"layers", 0, true, false});
    for (int b = 0; b < blocks; ++b) {
        const auto block = static_cast<int32_t>(m->modules.size());
        m->modules.push_back(Module{"layers." + std::to_string(b), 1, false, true});
        m->blocks.push_back(block);
        m->params.push_back(Param{"layers." + std::to_string(b) + ".weight", {rows, cols}, block, std::nullopt});
        Op op;
        op.name = "matmul";
        op.module = block;
        op.kind = OpKind::Matmul;
        op.flops.per_token = 2.0 * static_cast<double>(rows * cols);
        op.bwd_flops_factor = 2;
        op.saved_act.per_token = static_cast<double>(cols);
        m->ops.push_back(op);
    }
    return m;
}

Plan makePlan(std::shared_ptr<const Model> model, Strategy strategy, int nodes, int gpus_per_node) {
    Plan plan;
    plan.model = std::move(model);
    plan.model_ref = plan.model->name;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = gpus_per_node;
    plan.training.micro_batch = 1;
    plan.training.seq_len = 128;
    plan.sharding.strategy = strategy;
    return plan;
}

void fp32Everywhere(Plan& plan) {
    plan.training.param_dtype = std::nullopt;
    plan.training.reduce_dtype = std::nullopt;
}

struct Lowered {
    Mesh mesh;
    Program program;
    MemoryReport memory;
};

Lowered lowerAndReplay(const Plan& plan) {
    Lowered out;
    auto mesh = validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    out.mesh = *mesh;
    auto st = lower(plan, out.mesh, out.program);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    replayMemory(out.program, out.memory);
    return out;
}

int64_t commBytes(const Program& p, TaskKind kind) {
    int64_t sum = 0;
    for (const Task& t : p.tasks) {
        if (t.kind == kind) sum += t.comm_bytes;
    }
    return sum;
}

int countTasks(const Program& p, TaskKind kind) {
    int n = 0;
    for (const Task& t : p.tasks) n += t.kind == kind;
    return n;
}

// Every allocation of a step is freed by its end: the state returns to the initial one.
CategoryBytes finalState(const Program& p) {
    CategoryBytes cur = p.initial;
    for (const Task& t : p.tasks) {
        for (Span s : {t.mem_start, t.mem_end}) {
            for (uint32_t i = 0; i < s.count; ++i) cur[index(p.mem[s.offset + i].category)] += p.mem[s.offset + i].bytes;
        }
    }
    return cur;
}

std::shared_ptr<const Model> bundled(const char* name) {
    auto m = resolveModel(name);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return std::make_shared<const Model>(std::move(*m));
}

}  // namespace

// cases.json "fp32_ddp_vs_fsdp" (7B, fp32, Adam): DDP 28 / 28 / 56 GB per GPU.
TEST(LoweringTest, DdpFp32SevenBillionModelStates) {
    auto plan = makePlan(toyModel(7, 100000, 10000), Strategy::NoShard, 1, 8);
    fp32Everywhere(plan);
    auto r = lowerAndReplay(plan);
    EXPECT_EQ(r.memory.model_states.params, 28'000'000'000);
    EXPECT_EQ(r.memory.model_states.grads, 28'000'000'000);
    EXPECT_EQ(r.memory.model_states.optimizer, 56'000'000'000);
}

// Same source: FULL_SHARD on 8 GPUs: 3.5 / 3.5 / 7 GB (100,000 rows split evenly, no padding).
TEST(LoweringTest, FullShardFp32SevenBillionOnEightGpus) {
    auto plan = makePlan(toyModel(7, 100000, 10000), Strategy::FullShard, 1, 8);
    fp32Everywhere(plan);
    auto r = lowerAndReplay(plan);
    EXPECT_EQ(r.memory.model_states.params, 3'500'000'000);
    EXPECT_EQ(r.memory.model_states.grads, 3'500'000'000);
    EXPECT_EQ(r.memory.model_states.optimizer, 7'000'000'000);
}

// DDP with bf16 compute still keeps fp32 master params, fp32 grads and AdamW: 16 bytes/param.
TEST(LoweringTest, DdpModelStatesAreSixteenBytesPerParam) {
    auto model = bundled("llama-3.1-8b");
    const int64_t P = model->numParams();
    auto r = lowerAndReplay(makePlan(model, Strategy::NoShard, 1, 8));
    EXPECT_EQ(r.memory.model_states.params + r.memory.model_states.grads + r.memory.model_states.optimizer, 16 * P);
}

// FULL_SHARD: 16P/N up to padding. Worked out per parameter: each rank stores ceil(d0/N) rows
// of params and grads (4 + 4 bytes) and Adam state for its unpadded rows (8 bytes).
class FullShardScaling : public ::testing::TestWithParam<int> {};
TEST_P(FullShardScaling, ModelStatesAreSixteenPOverNUpToPadding) {
    const int world = GetParam();
    auto model = bundled("llama-3.1-8b");
    auto r = lowerAndReplay(makePlan(model, Strategy::FullShard, world / 8, 8));
    int64_t expected = 0;
    for (const Param& p : model->params) {
        const int64_t rows = (p.dim0() + world - 1) / world;
        expected += rows * p.rowNumel() * 8 + std::min(rows, p.dim0()) * p.rowNumel() * 8;
    }
    const auto& ms = r.memory.model_states;
    EXPECT_EQ(ms.params + ms.grads + ms.optimizer, expected);
    const double ideal = 16.0 * static_cast<double>(model->numParams()) / world;
    EXPECT_NEAR(static_cast<double>(expected) / ideal, 1.0, 0.01);
    EXPECT_GE(static_cast<double>(expected), ideal);
}
INSTANTIATE_TEST_SUITE_P(Worlds, FullShardScaling, ::testing::Values(8, 64, 512));

// ZeRO paper section 7: per step and rank, DDP moves 2P elements (all-reduce = reduce-scatter
// + all-gather), ZeRO-2 2P (reduce-scatter grads + all-gather params once), ZeRO-3 3P (params
// gathered in forward and again in backward). bf16 everywhere: itemsize 2.
TEST(LoweringTest, CommunicationVolumesMatchZeroPaper) {
    auto model = toyModel(4, 4096, 1024);
    const int64_t P = model->numParams();
    auto volume = [&](Strategy s) {
        auto plan = makePlan(model, s, 1, 8);
        plan.training.reduce_dtype = DType::BF16;
        auto r = lowerAndReplay(plan);
        return commBytes(r.program, TaskKind::AllGather) + commBytes(r.program, TaskKind::ReduceScatter) +
               2 * commBytes(r.program, TaskKind::AllReduce);
    };
    EXPECT_EQ(volume(Strategy::NoShard), 2 * P * 2);
    EXPECT_EQ(volume(Strategy::ShardGradOp), 2 * P * 2);
    EXPECT_EQ(volume(Strategy::FullShard), 3 * P * 2);
}

// The root unit is not resharded after forward, so its parameters are gathered once.
TEST(LoweringTest, RootUnitIsGatheredOnce) {
    auto model = bundled("llama-3.1-8b");
    auto r = lowerAndReplay(makePlan(model, Strategy::FullShard, 1, 8));
    int root_gathers = 0, block3_gathers = 0;
    for (const Task& t : r.program.tasks) {
        if (t.kind != TaskKind::AllGather) continue;
        root_gathers += t.unit == 0;
        block3_gathers += r.program.units[static_cast<size_t>(t.unit)].name == "model.layers.3";
    }
    EXPECT_EQ(root_gathers, 1);
    EXPECT_EQ(block3_gathers, 2);
    EXPECT_EQ(r.program.units.size(), 33u);
    EXPECT_EQ(r.program.units[1].name, "model.layers.0");
}

// Rule 1: d0 = 5 on 4 ranks: ceil(5/4) = 2 rows on every rank; optimizer state uses rank 0's
// unpadded 2 rows. fp32, 3 columns: shard 2*3*4 = 24 B, unsharded 4*24 = 96 B, Adam 2*24 = 48 B.
TEST(LoweringTest, PaddedDimZeroShards) {
    auto plan = makePlan(toyModel(1, 5, 3), Strategy::FullShard, 1, 4);
    fp32Everywhere(plan);
    auto r = lowerAndReplay(plan);
    ASSERT_EQ(r.program.units.size(), 2u);
    EXPECT_EQ(r.program.units[1].sharded_bytes, 24);
    EXPECT_EQ(r.program.units[1].unsharded_bytes, 96);
    EXPECT_EQ(r.program.initial[index(MemCategory::OptState)], 48);
    EXPECT_EQ(commBytes(r.program, TaskKind::AllGather), 2 * 96);
}

// FSDP1 FlatParameter: [5,3] then [3] fp32 on 4 ranks: 15 elements, the next start aligned to
// 16 bytes (16), + 3 = 19, padded to a multiple of 4 = 20; each rank holds 5 elements = 20 B.
TEST(LoweringTest, Fsdp1FlatParameterPadding) {
    auto model = toyModel(1, 5, 3);
    model->params.push_back(Param{"layers.0.bias", {3}, 2, std::nullopt});
    auto plan = makePlan(model, Strategy::FullShard, 1, 4);
    plan.sharding.fsdp_version = 1;
    fp32Everywhere(plan);
    auto r = lowerAndReplay(plan);
    EXPECT_EQ(r.program.units[1].sharded_bytes, 20);
    EXPECT_EQ(r.program.units[1].unsharded_bytes, 80);
}

// UnitInfo's buffers and collectives are the ones the tasks carry. A [64, 32] block on 8 ranks,
// bf16 params, fp32 reduce and master: FSDP2 all-gathers a flat output of 8 x (8 rows x 32) x 2 B
// = 4096 B and copies it out into 4096 B of parameters; FSDP1's all-gather writes the 2048-element
// FlatParameter (4096 B) itself. Either reduce-scatters 2048 fp32 elements = 8192 B.
class UnitBufferTable : public ::testing::TestWithParam<int> {};

TEST_P(UnitBufferTable, MatchesTheTasksOfTheUnit) {
    const int fsdp = GetParam();
    auto plan = makePlan(toyModel(2, 64, 32), Strategy::FullShard, 1, 8);
    plan.sharding.fsdp_version = fsdp;
    auto r = lowerAndReplay(plan);
    const UnitInfo& u = r.program.units[1];
    EXPECT_EQ(u.unshard_in_flight_bytes, 4096);
    EXPECT_EQ(u.unshard_wait_bytes, fsdp == 2 ? 8192 : 4096);
    EXPECT_EQ(u.unsharded_param_bytes, 4096);
    EXPECT_EQ(u.post_forward_shard_bytes, 0);
    EXPECT_EQ(u.reduce_scatter_input_bytes, 8192);
    EXPECT_EQ(u.no_sync_grad_bytes, 0);
    EXPECT_EQ(u.all_reduce.bytes, 0);

    // The unit's tasks of the step, in issue order.
    std::vector<const Task*> gathers, copy_ins, copy_outs, reduces;
    for (const Task& t : r.program.tasks) {
        if (t.unit != 1) continue;
        if (t.kind == TaskKind::AllGather) gathers.push_back(&t);
        if (t.kind == TaskKind::CopyIn) copy_ins.push_back(&t);
        if (t.kind == TaskKind::CopyOut) copy_outs.push_back(&t);
        if (t.kind == TaskKind::ReduceScatter) reduces.push_back(&t);
    }
    ASSERT_EQ(gathers.size(), 2u);
    ASSERT_EQ(copy_ins.size(), 2u);
    ASSERT_EQ(reduces.size(), 1u);
    auto sameCollective = [](const UnitCollective& c, const Task& t) {
        return c.bytes == t.comm_bytes && c.group_size == t.group_size && c.group_nodes == t.group_nodes;
    };
    EXPECT_TRUE(sameCollective(u.all_gather, *gathers[0]));
    EXPECT_TRUE(sameCollective(u.all_gather_bwd, *gathers[1]));
    EXPECT_TRUE(sameCollective(u.reduce_scatter, *reduces[0]));
    auto sum = [&](Span span, bool allocations_only) {
        int64_t b = 0;
        for (uint32_t i = 0; i < span.count; ++i) {
            const MemEvent& e = r.program.mem[span.offset + i];
            if (!allocations_only || e.bytes > 0) b += e.bytes;
        }
        return b;
    };
    // In flight: what the copy-in and the all-gather leave allocated.
    const int64_t in_flight = sum(copy_ins[0]->mem_start, false) + sum(copy_ins[0]->mem_end, false) +
                              sum(gathers[0]->mem_start, false) + sum(gathers[0]->mem_end, false);
    EXPECT_EQ(u.unshard_in_flight_bytes, in_flight);
    // The wait adds what the copy-out allocates (FSDP1 has none).
    EXPECT_EQ(copy_outs.size(), fsdp == 2 ? 2u : 0u);
    const int64_t copied_out = copy_outs.empty() ? 0 : sum(copy_outs[0]->mem_start, true);
    EXPECT_EQ(u.unshard_wait_bytes, in_flight + copied_out);
    int64_t reduce_scatter_input = 0;
    for (uint32_t i = 0; i < reduces[0]->mem_start.count; ++i) {
        const MemEvent& e = r.program.mem[reduces[0]->mem_start.offset + i];
        if (e.category == MemCategory::ReduceScatter && e.bytes > 0) reduce_scatter_input += e.bytes;
    }
    EXPECT_EQ(u.reduce_scatter_input_bytes, reduce_scatter_input);
    // The stream whose pool each buffer's block is cached in. FSDP2's foreach_reduce allocates
    // the reduce-scatter input on the current (compute) stream before
    // reduce_scatter_stream.wait_stream(current_stream), and the output under
    // `with stream(reduce_scatter_stream)` (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py);
    // FSDP1 allocates both on its post-backward stream. bf16 params, fp32 reduce and master: the
    // fp32 output is the sharded gradient (8192 / 8 = 1024 B).
    const Stream input_stream = fsdp == 2 ? Stream::Compute : Stream::ReduceScatter;
    int inputs = 0, outputs = 0;
    for (uint32_t i = 0; i < reduces[0]->mem_start.count; ++i) {
        const MemEvent& e = r.program.mem[reduces[0]->mem_start.offset + i];
        if (e.bytes == 8192) {
            EXPECT_EQ(e.stream, input_stream) << categoryName(e.category) << " event " << i;
            ++inputs;
        } else if (e.bytes == 1024) {
            EXPECT_EQ(e.category, MemCategory::ShardedGrad);
            EXPECT_EQ(e.stream, Stream::ReduceScatter);
            ++outputs;
        }
    }
    EXPECT_EQ(inputs, 2);  // allocated as Temp for the copy-in, then as Reduce Scatter
    EXPECT_EQ(outputs, 1);
}

INSTANTIATE_TEST_SUITE_P(Fsdp, UnitBufferTable, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& p) { return "Fsdp" + std::to_string(p.param); });

// The figures the unit table adds for reshard_after_forward=k, HSDP and no_sync: 2 nodes of 8,
// shard over 8, reshard to 4 after forward keeps 4096 / 4 = 1024 B; the HSDP all-reduce carries
// the 256-element fp32 gradient shard = 1024 B over the 2 replicas; no_sync holds the 2048
// gradient elements, upcast to fp32 by FSDP2 (8192 B), as bf16 by FSDP1 (4096 B).
TEST(LoweringTest, UnitBufferTableForReshardCountHybridAndNoSync) {
    auto plan = makePlan(toyModel(2, 64, 32), Strategy::HybridShard, 2, 8);
    plan.sharding.reshard_after_forward = ReshardMode::Count;
    plan.sharding.reshard_after_forward_k = 4;
    plan.training.grad_accum = 2;
    plan.training.no_sync = true;
    auto r = lowerAndReplay(plan);
    const UnitInfo& u = r.program.units[1];
    EXPECT_EQ(u.post_forward_shard_bytes, 1024);
    EXPECT_EQ(u.all_gather_bwd.group_size, 4);
    EXPECT_EQ(u.all_reduce.bytes, 1024);
    EXPECT_EQ(u.all_reduce.group_size, 2);
    EXPECT_EQ(u.all_reduce.group_nodes, 2);
    EXPECT_EQ(u.no_sync_grad_bytes, 8192);
    for (const Task& t : r.program.tasks) {
        if (t.unit == 1 && t.kind == TaskKind::AllReduce) {
            EXPECT_EQ(t.comm_bytes, u.all_reduce.bytes);
        }
    }
    plan.sharding.fsdp_version = 1;
    plan.sharding.reshard_after_forward = ReshardMode::Default;  // FSDP1 cannot reshard to k ranks
    EXPECT_EQ(lowerAndReplay(plan).program.units[1].no_sync_grad_bytes, 4096);
}

// SHARD_GRAD_OP keeps every unit unsharded from its forward to its backward, so when the
// activations dominate (here 2 KiB per token per block, 64K tokens) the step's peak, at the
// start of backward, holds all of them.
TEST(LoweringTest, ShardGradOpPeakHoldsEveryUnitUnsharded) {
    auto model = toyModel(6, 8192, 1024);
    auto plan = makePlan(model, Strategy::ShardGradOp, 1, 8);
    plan.training.seq_len = 65536;
    auto r = lowerAndReplay(plan);
    int64_t all_unsharded = 0;
    for (const UnitInfo& u : r.program.units) all_unsharded += u.unsharded_bytes;
    EXPECT_EQ(all_unsharded, 6 * 8192 * 1024 * 2);
    EXPECT_EQ(r.memory.at_peak[index(MemCategory::UnshardedParam)], all_unsharded);
    EXPECT_EQ(r.memory.at_peak[index(MemCategory::Activation)], 6 * int64_t{65536} * 1024 * 2);
    plan.sharding.strategy = Strategy::FullShard;
    auto full = lowerAndReplay(plan);
    EXPECT_EQ(full.memory.max_per_category[index(MemCategory::UnshardedParam)], r.program.units[1].unsharded_bytes);
    EXPECT_LT(full.memory.peak_bytes, r.memory.peak_bytes);
}

// Rule 4: in forward, unit i's flat output lives until unit i+1 waits for its unshard, so
// two flat outputs coexist. The copy-in's cast of the shard is not All Gather: FSDPMemTracker
// files only _allgather_base_'s output so (tracker_categories_test.cpp).
TEST(LoweringTest, FullShardHoldsAtMostTwoFlatAllGatherOutputs) {
    auto model = toyModel(6, 8192, 1024);
    auto r = lowerAndReplay(makePlan(model, Strategy::FullShard, 1, 8));
    const int64_t flat = 8192 * 1024 * 2;        // bf16 unsharded block
    EXPECT_EQ(r.memory.max_per_category[index(MemCategory::AllGather)], 2 * flat);
}

// Rule 8: with no_sync the unsharded grads, upcast to reduce_dtype, stay across micro-batches:
// all P elements in fp32 on every rank = 8x the sharded fp32 gradient at 8 ranks.
TEST(LoweringTest, NoSyncHoldsUnshardedGradients) {
    auto model = toyModel(6, 8192, 1024);
    const int64_t P = model->numParams();
    auto plan = makePlan(model, Strategy::FullShard, 1, 8);
    plan.training.grad_accum = 4;
    auto synced = lowerAndReplay(plan);
    plan.training.no_sync = true;
    auto nosync = lowerAndReplay(plan);
    const int64_t block_bf16 = 8192 * 1024 * 2;
    EXPECT_EQ(nosync.memory.max_per_category[index(MemCategory::UnshardedGrad)], P * 4 + block_bf16);
    // Reduced in the same micro-batch, a block's bf16 gradient is Temp while its backward makes
    // it and Unsharded Grad from its post-backward (FSDPMemTracker's
    // _fsdp_param_group_post_backward) until the reduce-scatter copy-in frees it: one block's at a
    // time.
    EXPECT_EQ(synced.memory.max_per_category[index(MemCategory::UnshardedGrad)], block_bf16);
    EXPECT_GE(synced.memory.max_per_category[index(MemCategory::Temp)], block_bf16);
    EXPECT_EQ(countTasks(nosync.program, TaskKind::ReduceScatter), 6);
    EXPECT_EQ(countTasks(synced.program, TaskKind::ReduceScatter), 24);
}

// HSDP on 2 nodes x 8: shard inside a node, all-reduce the gradient shard across nodes.
TEST(LoweringTest, HybridShardAllReducesAcrossNodes) {
    auto model = toyModel(4, 8192, 1024);
    const int64_t P = model->numParams();
    auto r = lowerAndReplay(makePlan(model, Strategy::HybridShard, 2, 8));
    EXPECT_EQ(r.mesh.shard_size, 8);
    EXPECT_EQ(r.mesh.replicate_size, 2);
    for (const Task& t : r.program.tasks) {
        if (t.kind == TaskKind::AllReduce) {
            EXPECT_EQ(t.group_size, 2);
            EXPECT_EQ(t.group_nodes, 2);
            EXPECT_EQ(t.stream, Stream::AllReduce);
        }
        if (t.kind == TaskKind::AllGather) {
            EXPECT_EQ(t.group_nodes, 1);
        }
    }
    EXPECT_EQ(commBytes(r.program, TaskKind::AllReduce), P / 8 * 4);  // fp32 gradient shard
    EXPECT_EQ(r.memory.model_states.params, P / 8 * 4);
}

// Rule 10: CPU offload keeps params, grads and optimizer state on the host; every unshard
// copies the shard to the GPU first.
TEST(LoweringTest, CpuOffloadMovesModelStatesToHost) {
    auto model = toyModel(4, 8192, 1024);
    const int64_t P = model->numParams();
    auto plan = makePlan(model, Strategy::FullShard, 1, 8);
    plan.training.offload = Offload::Cpu;
    auto r = lowerAndReplay(plan);
    EXPECT_EQ(r.program.initial[index(MemCategory::ShardedParam)], 0);
    EXPECT_EQ(r.program.initial[index(MemCategory::OptState)], 0);
    EXPECT_EQ(r.program.host_param_bytes, P / 8 * 4);
    EXPECT_EQ(r.program.host_optimizer_bytes, P / 8 * 8);
    EXPECT_EQ(countTasks(r.program, TaskKind::HostToDevice), countTasks(r.program, TaskKind::AllGather));
    EXPECT_EQ(countTasks(r.program, TaskKind::DeviceToHost), 4);
    EXPECT_EQ(r.memory.max_per_category[index(MemCategory::ShardedGrad)], 0);
    EXPECT_EQ(r.program.tasks.back().stream, Stream::Host);
}

// Frozen parameters: no grads, no optimizer state, still gathered.
TEST(LoweringTest, FrozenParametersAreGatheredButNotReduced) {
    auto model = toyModel(4, 8192, 1024);
    const int64_t P = model->numParams();
    auto plan = makePlan(model, Strategy::FullShard, 1, 8);
    auto all = lowerAndReplay(plan);
    plan.training.frozen_regex = "layers\\.[01]\\.";
    auto half = lowerAndReplay(plan);
    EXPECT_EQ(commBytes(half.program, TaskKind::AllGather), commBytes(all.program, TaskKind::AllGather));
    EXPECT_EQ(commBytes(half.program, TaskKind::ReduceScatter), P / 2 * 4);
    EXPECT_EQ(half.memory.model_states.optimizer, P / 2 / 8 * 8);
    EXPECT_EQ(half.memory.model_states.params, P / 8 * 4);
    EXPECT_LT(half.program.hardware_flops_per_step, all.program.hardware_flops_per_step);
}

// A Lowerer keeps tables between plans of one model (active ops, parameter shapes, each op's
// weight and gradient elements): plans that freeze parameters, then do not, then change the
// FSDP version, lowered by one Lowerer in a row, give what a fresh lowering gives.
TEST(LoweringTest, ReusedLowererMatchesAFreshOneAcrossFrozenAndFsdpVersions) {
    auto model = toyModel(4, 8192, 1024);
    const int64_t P = model->numParams();
    auto plain = makePlan(model, Strategy::FullShard, 1, 8);
    auto frozen = plain;
    frozen.training.frozen_regex = "layers\\.[01]\\.";
    auto fsdp1 = plain;
    fsdp1.sharding.fsdp_version = 1;
    Lowerer lowerer;
    Program reused;
    int i = 0;
    for (const Plan* plan : {&plain, &frozen, &plain, &fsdp1, &frozen, &plain}) {
        SCOPED_TRACE("plan " + std::to_string(i++));
        auto mesh = validatePlan(*plan);
        ASSERT_TRUE(mesh.ok()) << mesh.error().message;
        Program fresh;
        ASSERT_TRUE(lower(*plan, *mesh, fresh).ok());
        ASSERT_TRUE(lowerer.lower(*plan, *mesh, reused).ok());
        EXPECT_TRUE(reused == fresh);
        // Freezing half the blocks halves the reduce-scatter input (fp32: 4 bytes per element).
        EXPECT_EQ(commBytes(reused, TaskKind::ReduceScatter), plan == &frozen ? P / 2 * 4 : P * 4);
    }
}

// Blocks of the same parameter shapes share their sizes (the lowering copies them run by run),
// but a parameter kept in another dtype is a different parameter: block 1's weight in bf16
// shards to half block 0's fp32 bytes. [8192, 1024] over 8 ranks: 1024 x 1024 elements each.
TEST(LoweringTest, RepeatedBlockOfAnotherDtypeGetsItsOwnSizes) {
    auto model = toyModel(3, 8192, 1024);
    model->params[1].dtype = DType::BF16;
    auto r = lowerAndReplay(makePlan(model, Strategy::FullShard, 1, 8));
    ASSERT_EQ(r.program.units.size(), 4u);
    EXPECT_EQ(r.program.units[1].name, "layers.0");
    EXPECT_EQ(r.program.units[1].sharded_bytes, 1024 * 1024 * 4);
    EXPECT_EQ(r.program.units[2].sharded_bytes, 1024 * 1024 * 2);
    EXPECT_EQ(r.program.units[3].sharded_bytes, 1024 * 1024 * 4);
    // Gathered in param_dtype (bf16) alike.
    EXPECT_EQ(r.program.units[2].unsharded_bytes, r.program.units[1].unsharded_bytes);
}

// Llama-3.1-8B, FULL_SHARD per block on 8 GPUs, one sequence of 8192 tokens.
Plan llama8BAt8192(Checkpointing ac) {
    auto plan = makePlan(bundled("llama-3.1-8b"), Strategy::FullShard, 1, 8);
    plan.training.seq_len = 8192;
    plan.training.ac = ac;
    return plan;
}

// A unit whose root lies inside a block (here block 0's MLP, the rest in the root unit) runs its
// own ops in its own forward task: its segment is cut out of the block's, and its forward FLOPs
// are the MLP's three matmuls (gate, up, down: 2 * T * hidden * intermediate each, Llama-3.1-8B's
// config.json: hidden 4096, intermediate 14336) plus the SwiGLU's elementwise work.
TEST(LoweringTest, UnitInsideABlockRunsItsOwnOps) {
    auto plan = llama8BAt8192(Checkpointing::None);
    plan.sharding.wrap.kind = WrapKind::Modules;
    plan.sharding.wrap.modules = {"model.layers.0.mlp"};
    auto r = lowerAndReplay(plan);
    int32_t mlp = -1;
    for (size_t u = 0; u < r.program.units.size(); ++u) {
        if (r.program.units[u].name == "model.layers.0.mlp") mlp = static_cast<int32_t>(u);
    }
    ASSERT_GE(mlp, 0);
    const int64_t matmuls = 3 * 2 * int64_t{8192} * 4096 * 14336;
    EXPECT_GE(r.program.units[static_cast<size_t>(mlp)].fwd_flops, matmuls);
    EXPECT_LT(r.program.units[static_cast<size_t>(mlp)].fwd_flops, matmuls + matmuls / 100);
    int forwards = 0;
    for (const Task& t : r.program.tasks) forwards += t.kind == TaskKind::Forward && t.unit == mlp;
    EXPECT_EQ(forwards, 1);
}

// Full checkpointing keeps only each block's input: b*s*h bf16 elements per block.
TEST(LoweringTest, FullCheckpointingKeepsBlockInputs) {
    auto plan = llama8BAt8192(Checkpointing::Full);
    auto r = lowerAndReplay(plan);
    EXPECT_EQ(r.program.units[5].activation_bytes, 8192 * 4096 * 2);
    EXPECT_EQ(countTasks(r.program, TaskKind::Recompute), 32);
    plan.training.ac = Checkpointing::None;
    auto none = lowerAndReplay(plan);
    EXPECT_GT(none.program.units[5].activation_bytes, 10 * r.program.units[5].activation_bytes);
    EXPECT_GT(r.program.hardware_flops_per_step, none.program.hardware_flops_per_step);
}

// What a recompute makes is Temp, as FSDPMemTracker files it (its AC flag stays down: the FSDP
// unit's pre-forward does not run again inside checkpoint_wrapper); only the block's input, kept
// from the forward, is Activation in backward.
TEST(LoweringTest, RecomputedTensorsAreTemp) {
    auto plan = llama8BAt8192(Checkpointing::Full);
    auto r = lowerAndReplay(plan);
    int recomputes = 0;
    for (const Task& t : r.program.tasks) {
        if (t.kind != TaskKind::Recompute) continue;
        ++recomputes;
        int64_t temp_made = 0;
        for (const Span span : {t.mem_start, t.mem_peak, t.mem_end}) {
            for (uint32_t i = 0; i < span.count; ++i) {
                const MemEvent& e = r.program.mem[span.offset + i];
                if (e.bytes > 0) {
                    EXPECT_NE(e.category, MemCategory::Activation) << "recompute of unit " << t.unit;
                }
            }
        }
        for (uint32_t i = 0; i < t.mem_end.count; ++i) {
            const MemEvent& e = r.program.mem[t.mem_end.offset + i];
            if (e.bytes > 0 && e.category == MemCategory::Temp) temp_made += e.bytes;
        }
        // A block's saved tensors, re-created: more than ten times the kept input (8192 x 4096 x 2 B).
        EXPECT_GT(temp_made, 10 * int64_t{8192} * 4096 * 2);
    }
    EXPECT_EQ(recomputes, 32);
}

// Every allocation is freed within the step, for every strategy and option combination.
TEST(LoweringTest, StepReturnsToInitialState) {
    auto model = bundled("llama-3.1-8b");
    for (Strategy s : {Strategy::NoShard, Strategy::ShardGradOp, Strategy::FullShard, Strategy::HybridShard,
                       Strategy::HybridShardZero2}) {
        for (int fsdp : {1, 2}) {
            for (bool no_sync : {false, true}) {
                for (Checkpointing ac : {Checkpointing::None, Checkpointing::Full, Checkpointing::Layer, Checkpointing::Op,
                                                         Checkpointing::AttnCore}) {
                    auto plan = makePlan(model, s, 2, 8);
                    plan.sharding.fsdp_version = fsdp;
                    plan.training.grad_accum = 3;
                    plan.training.no_sync = no_sync;
                    plan.training.ac = ac;
                    plan.training.ac_every = ac == Checkpointing::Layer ? 2 : 1;
                    auto r = lowerAndReplay(plan);
                    EXPECT_EQ(finalState(r.program), r.program.initial)
                        << strategyName(s) << " fsdp" << fsdp << " no_sync=" << no_sync;
                    for (int c = 0; c < kMemCategoryCount; ++c) EXPECT_GE(r.memory.max_per_category[c], 0);
                }
            }
        }
    }
}

// Dependencies point backwards and collectives carry their group.
TEST(LoweringTest, ProgramIsWellFormed) {
    auto model = bundled("llama-3.1-8b");
    auto r = lowerAndReplay(makePlan(model, Strategy::HybridShard, 2, 8));
    const Program& p = r.program;
    for (int32_t id = 0; id < p.size(); ++id) {
        const Task& t = p.tasks[static_cast<size_t>(id)];
        for (uint32_t i = 0; i < t.deps.count; ++i) EXPECT_LT(p.deps[t.deps.offset + i], id);
        if (isCollective(t.kind)) {
            EXPECT_GT(t.comm_bytes, 0);
            EXPECT_GE(t.group_size, 2);
        }
    }
    EXPECT_EQ(p.taskLabel(1), "AG (root)");
}

// "layer:2" (torchtitan's selective layer AC, selective_ac_option "2"): _apply_layer_sac
// (torchtitan/distributed/activation_checkpoint.py; parallelize_llama.py before it) increments its
// block count before testing count % K == 0, so blocks 1, 3, 5, ... are checkpointed, not 0, 2, 4.
TEST(LoweringTest, CheckpointEveryOtherBlock) {
    auto plan = llama8BAt8192(Checkpointing::None);
    auto spec = parseAcSpec("layer:2");
    ASSERT_TRUE(spec.has_value());
    plan.training.ac = spec->mode;
    plan.training.ac_every = spec->every;
    auto r = lowerAndReplay(plan);
    EXPECT_GT(r.program.units[1].activation_bytes, 10 * r.program.units[2].activation_bytes);  // layers.0: all
    EXPECT_EQ(r.program.units[2].activation_bytes, 8192 * 4096 * 2);  // model.layers.1: input only
    EXPECT_EQ(r.program.units[4].activation_bytes, 8192 * 4096 * 2);  // model.layers.3
    EXPECT_EQ(r.program.units[32].activation_bytes, 8192 * 4096 * 2);  // model.layers.31, the last
    EXPECT_EQ(countTasks(r.program, TaskKind::Recompute), 16);
    EXPECT_EQ(acString(plan.training.ac, plan.training.ac_every), "layer:2");
}

TEST(LoweringTest, CheckpointingSpellings) {
    // full:K stays an alias of layer:K; K = 1 is every block, i.e. full.
    auto alias = parseAcSpec("full:4");
    ASSERT_TRUE(alias.has_value());
    EXPECT_EQ(alias->mode, Checkpointing::Layer);
    EXPECT_EQ(alias->every, 4);
    EXPECT_EQ(acString(alias->mode, alias->every), "layer:4");
    auto one = parseAcSpec("layer:1");
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(one->mode, Checkpointing::Full);
    EXPECT_EQ(parseAcSpec("OP")->mode, Checkpointing::Op);
    EXPECT_EQ(parseAcSpec("attn-core")->mode, Checkpointing::AttnCore);
    // Ambiguous or incomplete spellings are errors that list the choices.
    for (const char* bad : {"selective", "selective:2", "layer", "op:2", "full:0", "full:x", "attn-core:2"}) {
        EXPECT_FALSE(parseAcSpec(bad).has_value()) << bad;
    }
    const std::string why = acSpecError("selective");
    EXPECT_NE(why.find("ambiguous"), std::string::npos) << why;
    EXPECT_NE(why.find("layer:K"), std::string::npos) << why;
    EXPECT_NE(why.find("op (torchtitan per-op SAC)"), std::string::npos) << why;
    EXPECT_NE(why.find("attn-core"), std::string::npos) << why;
    // The report names the mode in words, and which blocks layer:K takes.
    EXPECT_NE(acDescription(Checkpointing::Layer, 2, true).find("blocks 1, 3, ..."), std::string::npos);
    EXPECT_NE(acDescription(Checkpointing::AttnCore, 1, true).find("no-op with flash attention"), std::string::npos);
    EXPECT_EQ(acDescription(Checkpointing::AttnCore, 1, false).find("no-op"), std::string::npos);
}

// Megatron's attention-core recompute drops only s^2 tensors; a flash kernel keeps none, so the
// plan keeps and computes exactly what it does without checkpointing.
TEST(LoweringTest, AttnCoreIsANoOpWithFlashAttention) {
    auto model = bundled("llama-3.1-8b");
    auto plan = makePlan(model, Strategy::FullShard, 1, 8);
    auto none = lowerAndReplay(plan);
    plan.training.ac = Checkpointing::AttnCore;
    auto core_ac = lowerAndReplay(plan);
    EXPECT_EQ(core_ac.program.units[5].activation_bytes, none.program.units[5].activation_bytes);
    EXPECT_EQ(core_ac.program.hardware_flops_per_step, none.program.hardware_flops_per_step);
    EXPECT_EQ(core_ac.memory.peak_bytes, none.memory.peak_bytes);
    plan.training.attention = AttentionKernel::Eager;
    auto eager_core = lowerAndReplay(plan);
    plan.training.ac = Checkpointing::None;
    auto eager_none = lowerAndReplay(plan);
    EXPECT_LT(eager_core.program.units[5].activation_bytes, eager_none.program.units[5].activation_bytes);
}

// Per-op SAC (torchtitan's _save_list policy, torchtitan/models/llama/parallelize_llama.py
// _apply_ac_to_transformer_block) on one Llama-3.1-8B block, 8192 tokens, bf16, flash attention.
// Within a block the forward runs 7 aten.mm: q(1) k(2) v(3) o(4) gate(5) up(6) down(7); the odd
// ones are saved, the even ones recomputed, SDPA's outputs saved. The block keeps, per token:
//   input h = 4096 (checkpoint input) + q_proj out 4096 + v_proj out 1024 + SDPA out 32*128 = 4096
//   + gate_proj out 14336 + down_proj out 4096 = 31744 bf16 elements = 63488 bytes,
//   + SDPA logsumexp 32 heads fp32 = 128 bytes: 63616 bytes per token, 521,142,272 bytes.
// The recompute runs k_proj, o_proj, up_proj (and the norms, RoPE, SiLU, mul, residuals) but no
// attention, and no q, v, gate or down GEMM.
TEST(LoweringTest, PerOpSacKeepsOddMatmulsAndAttention) {
    auto plan = llama8BAt8192(Checkpointing::Op);
    auto r = lowerAndReplay(plan);
    EXPECT_EQ(r.program.units[5].activation_bytes, int64_t{8192} * 63616);
    EXPECT_EQ(countTasks(r.program, TaskKind::Recompute), 32);
    int32_t rec = -1, fwd = -1;
    for (int32_t id = 0; id < r.program.size(); ++id) {
        const Task& t = r.program.tasks[static_cast<size_t>(id)];
        if (t.unit != 5) continue;
        if (t.kind == TaskKind::Recompute) rec = id;
        if (t.kind == TaskKind::Forward) fwd = id;
    }
    ASSERT_GE(rec, 0);
    ASSERT_GE(fwd, 0);
    std::vector<std::array<int64_t, 3>> gemms;
    int attention = 0;
    const Task& rt = r.program.tasks[static_cast<size_t>(rec)];
    for (uint32_t i = 0; i < rt.ops.count; ++i) {
        const OpShape& o = r.program.ops[rt.ops.offset + i];
        if (o.kind == OpShapeKind::Gemm) gemms.push_back({o.m, o.n, o.k});
        if (o.kind == OpShapeKind::Attention) ++attention;
    }
    const std::vector<std::array<int64_t, 3>> expected{{8192, 1024, 4096}, {8192, 4096, 4096}, {8192, 14336, 4096}};
    EXPECT_EQ(gemms, expected);
    EXPECT_EQ(attention, 0);
    // Recompute FLOPs = forward FLOPs less the kept ops': q 2*4096*4096, v 2*4096*1024, gate and
    // down 2*4096*14336 each, per token, and causal flash attention 2*4096*8192 per token.
    const int64_t T = 8192;
    const int64_t kept = T * 2 * 4096 * (4096 + 1024 + 2 * 14336) + T * 2 * 4096 * 8192;
    const Task& ft = r.program.tasks[static_cast<size_t>(fwd)];
    EXPECT_EQ(rt.flops, ft.flops - kept);
    // Against full AC, whose recompute is the whole forward, the step executes `kept` fewer FLOPs
    // per block and keeps more.
    plan.training.ac = Checkpointing::Full;
    auto full = lowerAndReplay(plan);
    EXPECT_EQ(full.program.hardware_flops_per_step - r.program.hardware_flops_per_step, 32 * kept);
    EXPECT_EQ(full.program.units[5].activation_bytes, T * 4096 * 2);
}

// FSDP1 forward_prefetch issues unit i+1's all-gather before unit i computes, so two units'
// unsharded FlatParameters coexist in forward (without it, one at a time plus none ahead).
TEST(LoweringTest, Fsdp1ForwardPrefetchGathersAhead) {
    auto model = toyModel(4, 8192, 1024);
    auto plan = makePlan(model, Strategy::FullShard, 1, 8);
    plan.sharding.fsdp_version = 1;
    plan.sharding.backward_prefetch = ShardingSpec::BackwardPrefetch::None;
    auto plain = lowerAndReplay(plan);
    plan.sharding.forward_prefetch = true;
    auto ahead = lowerAndReplay(plan);
    const int64_t block = 8192 * 1024 * 2;
    EXPECT_EQ(plain.memory.max_per_category[index(MemCategory::UnshardedParam)], block);
    EXPECT_EQ(ahead.memory.max_per_category[index(MemCategory::UnshardedParam)], 2 * block);
    // In issue order, the second all-gather comes before the first forward compute.
    int32_t first_fwd = -1, second_ag = -1, ags = 0;
    for (int32_t id = 0; id < ahead.program.size(); ++id) {
        const Task& t = ahead.program.tasks[static_cast<size_t>(id)];
        if (t.kind == TaskKind::Forward && first_fwd < 0) first_fwd = id;
        if (t.kind == TaskKind::AllGather && ++ags == 2) second_ag = id;
    }
    EXPECT_LT(second_ag, first_fwd);
}

// FSDP1 BACKWARD_POST prefetches, after a unit's gradient, the unit next in pre-backward order,
// unless that unit's pre-backward already ran. The root's post-backward comes last, so it must
// not re-gather the first block it would "prefetch": each block is gathered twice (forward and
// backward), the root once, and the step ends where it started.
TEST(LoweringTest, Fsdp1BackwardPostDoesNotRegatherFinishedUnits) {
    auto plan = makePlan(bundled("pythia-160m"), Strategy::FullShard, 1, 8);
    plan.sharding.fsdp_version = 1;
    plan.sharding.backward_prefetch = ShardingSpec::BackwardPrefetch::Post;
    auto r = lowerAndReplay(plan);
    std::vector<int> gathers(r.program.units.size(), 0);
    for (const Task& t : r.program.tasks) {
        if (t.kind == TaskKind::AllGather) ++gathers[static_cast<size_t>(t.unit)];
    }
    EXPECT_EQ(gathers[0], 1);
    for (size_t u = 1; u < gathers.size(); ++u) EXPECT_EQ(gathers[u], 2) << r.program.units[u].name;
    EXPECT_EQ(finalState(r.program), r.program.initial);
}

namespace {

// FLOPs of the GEMM and attention kernels of a step (the Program's OpShapes).
int64_t matrixFlopsPerStep(const Program& p) {
    int64_t sum = 0;
    for (const Task& t : p.tasks) {
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const OpShape& o = p.ops[t.ops.offset + i];
            if (o.kind != OpShapeKind::Elementwise) sum += opFlops(o);
        }
    }
    return sum;
}

}  // namespace

// MFU and HFU share the step time and the peak, so their ratio is model_flops_per_step over
// hardware_flops_per_step. Llama-3.1-8B, 8192 tokens, flash attention, no recompute:
//  - model FLOPs (torchtitan): 8192 * (6 * 7,504,924,672 + 12 * 32 * 4096 * 8192) = 474,435,173,744,640.
//  - executed GEMMs: 6 FLOPs per token per linear weight, 7,504,658,432 of them (the 32 blocks'
//    218,103,808 plus the 525,336,576 LM head): 368,868,971,249,664; causal flash attention
//    2 * 4096 * 8192 forward + 2.5x that backward per token per layer: 61,572,651,155,456.
// The executed attention is 7/12 of the convention's, so with flash attention and no recompute
// HFU reads below MFU (by about 9% here): the conventions say why (kMfuConvention, kHfuConvention).
TEST(LoweringTest, FlopConventionsForLlama8B) {
    auto plan = llama8BAt8192(Checkpointing::None);
    auto none = lowerAndReplay(plan);
    EXPECT_EQ(none.program.model_flops_per_step, 474435173744640);
    EXPECT_EQ(matrixFlopsPerStep(none.program), 368868971249664 + 61572651155456);
    EXPECT_LT(none.program.hardware_flops_per_step, none.program.model_flops_per_step);
    EXPECT_GT(none.program.hardware_flops_per_step, matrixFlopsPerStep(none.program));

    // Eager attention computes the whole s x s product and a 2x backward: 12 * 4096 * 8192 per
    // token per layer, the convention's figure, so HFU >= MFU without recompute.
    plan.training.attention = AttentionKernel::Eager;
    auto eager = lowerAndReplay(plan);
    EXPECT_EQ(matrixFlopsPerStep(eager.program), 368868971249664 + int64_t{8192} * 12 * 32 * 4096 * 8192);
    EXPECT_GE(eager.program.hardware_flops_per_step, eager.program.model_flops_per_step);
    EXPECT_EQ(eager.program.model_flops_per_step, none.program.model_flops_per_step);

    // Full AC: HFU rises by exactly the recomputed FLOPs (every block's forward again); MFU does not move.
    plan.training.attention = AttentionKernel::Flash;
    plan.training.ac = Checkpointing::Full;
    auto full = lowerAndReplay(plan);
    int64_t block_forward = 0, recomputed = 0;
    for (const Task& t : full.program.tasks) {
        if (t.kind == TaskKind::Forward && t.unit >= 1) block_forward += t.flops;
        if (t.kind == TaskKind::Recompute) recomputed += t.flops;
    }
    EXPECT_EQ(recomputed, block_forward);
    EXPECT_EQ(full.program.hardware_flops_per_step - none.program.hardware_flops_per_step, recomputed);
    EXPECT_EQ(full.program.model_flops_per_step, none.program.model_flops_per_step);
}

// clip_grad_norm_ (torch/nn/utils/clip_grad.py, foreach): _foreach_norm reads each sharded gradient
// once and _foreach_mul_ reads and writes it: 3 fp32 accesses per element, after the last
// reduce-scatter and before the optimizer step. Llama-3.1-8B over 8 ranks: every dim 0 divides by
// 8, so each rank's shard is 8,030,261,248 / 8 = 1,003,782,656 elements: 12,045,391,872 bytes.
TEST(LoweringTest, ClipGradNormPassesOverTheShardedGradientsBeforeTheOptimizer) {
    Plan plan = makePlan(bundled("llama-3.1-8b"), Strategy::FullShard, 1, 8);
    plan.training.clip_grad_norm = 1.0;
    const Lowered l = lowerAndReplay(plan);
    ASSERT_EQ(countTasks(l.program, TaskKind::ClipGrad), 1);
    int32_t clip = -1, opt = -1, last_rs = -1;
    for (int32_t id = 0; id < l.program.size(); ++id) {
        const Task& t = l.program.tasks[static_cast<size_t>(id)];
        if (t.kind == TaskKind::ClipGrad) clip = id;
        if (t.kind == TaskKind::OptimizerStep) opt = id;
        if (t.kind == TaskKind::ReduceScatter) last_rs = id;
    }
    const Task& c = l.program.tasks[static_cast<size_t>(clip)];
    EXPECT_EQ(c.hbm_bytes, int64_t{12'045'391'872});
    EXPECT_EQ(c.flops, int64_t{3} * 1'003'782'656);
    EXPECT_EQ(c.stream, Stream::Compute);
    EXPECT_LT(clip, opt);
    const auto depends = [&](int32_t task, int32_t on) {
        const Task& t = l.program.tasks[static_cast<size_t>(task)];
        for (uint32_t i = 0; i < t.deps.count; ++i) {
            if (l.program.deps[t.deps.offset + i] == on) return true;
        }
        return false;
    };
    EXPECT_TRUE(depends(clip, last_rs));
    EXPECT_TRUE(depends(opt, clip));
    // The same plan without clipping has no such task, and the same memory.
    plan.training.clip_grad_norm = 0;
    const Lowered none = lowerAndReplay(plan);
    EXPECT_EQ(countTasks(none.program, TaskKind::ClipGrad), 0);
    EXPECT_EQ(none.memory.peak_bytes, l.memory.peak_bytes);
}

// GPT-2's buffers: transformers 4.x registers a bool causal mask of n_positions^2 and a scalar per
// layer (12 x (1024 x 1024 + 4) = 12,582,960 bytes, what FSDPMemTracker files as Buffer with
// transformers 4.57); transformers 5 registers none (hf_mask 5.x, the default).
TEST(LoweringTest, Gpt2BuffersAreTransformers4s) {
    Plan plan = makePlan(bundled("gpt2"), Strategy::FullShard, 1, 8);
    plan.training.hf_mask = HfMask::V4;
    EXPECT_EQ(lowerAndReplay(plan).program.initial[index(MemCategory::Buffer)], 12 * (1024 * 1024 + 4));
    plan.training.hf_mask = HfMask::V5;
    EXPECT_EQ(lowerAndReplay(plan).program.initial[index(MemCategory::Buffer)], 0);
}
