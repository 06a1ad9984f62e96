// End-to-end check of the default cost models against published throughput, with the
// implementation and AC mode each run used (tests/data/reference-cases.json
// "torchtitan_llama3_a100_64", from pytorch/torchtitan docs/performance.md): torchtitan's Llama,
// FSDP2 FULL_SHARD per block, seq 8192, local batch 1, AdamW, bf16 params / fp32 reduce, eager
// kernels, on 64 A100-80GB:
//   Llama 3 8B, selective layer AC (option 2 = "layer:2"): 2904 tokens/s/GPU
//   Llama 3 8B, selective op AC ("op"):                    2973 tokens/s/GPU
//   Llama 3 70B, full AC:                                  331 tokens/s/GPU
// and on H100, where the same docs report 33-39% MFU for 1D FSDP Llama 3.1 8B on 8 H100s (Grand
// Teton: 96 GB HBM2e at 2.4 TB/s, default 500 W power limit; local batch 2, selective op AC):
// 5,762 tokens/s/GPU eager, 6,667 with torch.compile.
//
// The code those runs used (2024): torchtitan's own eager RMSNorm (norm_type "rmsnorm",
// `_norm(x.float()).type_as(x) * weight`), the kernels of HuggingFace's, so the runs are timed with
// --impl hf (docs/validation-time.md); today's --impl torchtitan (fused nn.RMSNorm) is printed too.
// The A100 cluster: torchtitan's multi-node script runs its A100s on AWS with EFA
// (multinode_trainer.slurm: "Enable for A100", FI_PROVIDER=efa), i.e. p4de.24xlarge, 400 Gb/s per
// 8 GPUs (examples/gpus/a100-80g-p4de.json).
// The cost model's figures come from data sheets and kernel-level measurements (best-shape GEMM
// rates, FlashAttention-2's and -3's papers, NCCL's channel search); none is fitted to these runs.
//
// MFU follows torchtitan's convention (Model::modelFlopsPerToken: 6 * (N - N_embedding) +
// 12 * L * h * s): for Llama 3 8B at seq 8192, 57,914,449,920 FLOPs per token.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

struct RunSpec {
    const char* model;
    const char* gpu;  // preset or GPU file under the source tree
    int nodes;
    int micro_batch;
    core::Checkpointing ac;
    int every;
    core::KernelImpl kernels = core::KernelImpl::Eager;
    core::ModelImpl impl = core::ModelImpl::Hf;
    // The mesh's other dimensions (FSDP over the rest of the ranks) and the 3D runs' settings.
    int tp = 1;
    int pp = 1;
    core::PpSchedule schedule = core::PpSchedule::OneFOneB;
    int virtual_stages = 1;
    int64_t grad_accum = 1;  // with pp: the pipeline's micro-batches
    int64_t seq_len = 8192;
    bool async_tp = false;
    bool float8 = false;  // torchao Float8Linear with the fp8 all-gather (--all-gather-dtype fp8)
};

core::Result<Evaluation> evaluate(const RunSpec& r) {
    auto model = core::resolveModel(r.model);
    if (!model.ok()) return model.error();
    auto gpu = core::resolveGpu(r.gpu);
    if (!gpu.ok()) return gpu.error();
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = r.model;
    plan.cluster.gpu = *gpu;
    plan.cluster.nodes = r.nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.micro_batch = r.micro_batch;
    plan.training.seq_len = r.seq_len;
    plan.training.grad_accum = r.grad_accum;
    if (r.float8) plan.training.all_gather_dtype = core::AllGatherDtype::Fp8;
    plan.sharding.tp = r.tp;
    plan.sharding.pp = r.pp;
    plan.sharding.pp_schedule = r.schedule;
    plan.sharding.pp_virtual_stages = r.virtual_stages;
    plan.sharding.async_tp = r.async_tp;
    plan.training.optimizer = core::Optimizer::AdamW;
    plan.training.param_dtype = core::DType::BF16;
    plan.training.reduce_dtype = core::DType::F32;
    plan.training.ac = r.ac;
    plan.training.ac_every = r.every;
    plan.training.kernels = r.kernels;
    plan.training.impl = r.impl;
    plan.sharding.strategy = core::Strategy::FullShard;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    return evaluatePlan(plan, nullptr);
}

core::StepSummary predict(const RunSpec& r) {
    auto evaluated = evaluate(r);
    EXPECT_TRUE(evaluated.ok()) << evaluated.error().message;
    if (!evaluated.ok()) return {};
    const core::StepSummary& s = evaluated->summary;
    std::printf("%s on %d x %s, impl %s, AC %s, kernels %s: step %.3f s, compute %.3f s, exposed comm %.3f s, "
                "tokens/s/GPU %.0f, MFU %.3f, HFU %.3f, peak %.2f GiB\n",
                r.model, r.nodes * 8, evaluated->profile.gpu.name.c_str(), std::string(core::modelImplName(r.impl)).c_str(),
                core::acString(r.ac, r.every).c_str(),
                std::string(core::kernelImplName(r.kernels)).c_str(), s.step_s, s.compute_s, s.exposed_comm_s,
                s.tokens_per_s_per_gpu, s.mfu, s.hfu, static_cast<double>(s.peak_bytes) / static_cast<double>(core::kGiB));
    return s;
}

const std::string kTeton = std::string(SHARDCAST_SOURCE_DIR) + "/examples/gpus/h100-grand-teton-500w.json";
const std::string kP4de = std::string(SHARDCAST_SOURCE_DIR) + "/examples/gpus/a100-80g-p4de.json";

TEST(TorchtitanCheckTest, Llama3_8BLayerAcOn64A100WithinTenPercent) {
    const core::StepSummary s = predict({"llama-3.1-8b", kP4de.c_str(), 8, 1, core::Checkpointing::Layer, 2});
    EXPECT_NEAR(s.tokens_per_s_per_gpu / 2904.0, 1.0, 0.10);
}

// Per-op SAC recomputes less than every-other-block, so it must also be predicted faster than the
// layer:2 run, as published.
TEST(TorchtitanCheckTest, Llama3_8BOpSacOn64A100WithinTenPercent) {
    const core::StepSummary op = predict({"llama-3.1-8b", kP4de.c_str(), 8, 1, core::Checkpointing::Op, 1});
    EXPECT_NEAR(op.tokens_per_s_per_gpu / 2973.0, 1.0, 0.10);
    EXPECT_GT(op.tokens_per_s_per_gpu,
              predict({"llama-3.1-8b", kP4de.c_str(), 8, 1, core::Checkpointing::Layer, 2}).tokens_per_s_per_gpu);
}

TEST(TorchtitanCheckTest, Llama3_70BFullAcOn64A100WithinTenPercent) {
    const core::StepSummary s = predict({"llama-3.1-70b", kP4de.c_str(), 8, 1, core::Checkpointing::Full, 1});
    EXPECT_NEAR(s.tokens_per_s_per_gpu / 331.0, 1.0, 0.10);
}

// Today's torchtitan model (fused nn.RMSNorm) runs fewer eager kernels: faster than the 2024 code.
TEST(TorchtitanCheckTest, TodaysTorchtitanModelIsFasterThanThe2024One) {
    RunSpec r{"llama-3.1-8b", kP4de.c_str(), 8, 1, core::Checkpointing::Op, 1};
    const double eager_norm = predict(r).tokens_per_s_per_gpu;
    r.impl = core::ModelImpl::Torchtitan;
    EXPECT_GT(predict(r).tokens_per_s_per_gpu, eager_norm);
}

// The same code on H100 (held out: no figure of the model was set from it). Published: MFU 0.337
// eager, 0.390 compiled (torchtitan's docs: 33-39%), against the A100 runs' 0.54-0.57.
TEST(TorchtitanCheckTest, Llama3_8BOn8H100EagerMfuInThePublishedBand) {
    const core::StepSummary eager = predict({"llama-3.1-8b", kTeton.c_str(), 1, 2, core::Checkpointing::Op, 1});
    EXPECT_GE(eager.mfu, 0.33);
    EXPECT_LE(eager.mfu, 0.40);
    const core::StepSummary a100 = predict({"llama-3.1-8b", kP4de.c_str(), 8, 1, core::Checkpointing::Op, 1});
    EXPECT_LT(eager.mfu, a100.mfu - 0.1);
    // torch.compile is faster, as published; the model overestimates its gain (docs/validation-time.md).
    const core::StepSummary compiled =
        predict({"llama-3.1-8b", kTeton.c_str(), 1, 2, core::Checkpointing::Op, 1, core::KernelImpl::Compile});
    EXPECT_GT(compiled.tokens_per_s_per_gpu, eager.tokens_per_s_per_gpu);
}

// torchtitan's 3D runs (benchmarks/llama3_h100_202412_torchtitan.md, Table 5, held out: no figure
// was set from them): Llama 3.1 405B on 512 Grand Teton H100s, FSDP 8 x TP 8 x PP 8, local batch 32,
// full AC, torch.compile, Float8 with the fp8 all-gather, async TP. The doc names torchtitan commit
// 9dec370, whose build_pipeline_schedule (torchtitan/parallelisms/pipelining_utils.py) splits the
// local batch into pipeline_parallel_degree micro-batches when pipeline_parallel_microbatches is
// unset, as in train_configs/llama3_405b.toml: 8 micro-batches of 4 sequences; its split points
// (generate_split_points) are the 15 / 16 x 6 / 15 blocks of the balanced split here (7 / 8 x 14 / 7
// over the 16 stages of Interleaved1F1B, 2 stages per rank, its default for looped schedules).
// Published TPS/GPU: 1F1B 100, Interleaved1F1B 128. Table 6's first row is the same 3D mesh at seq
// 32768, local batch 8 (8 micro-batches of 1): 76 TPS/GPU, 75.3 GiB.
RunSpec run405b3d(core::PpSchedule schedule, int micro_batch, int64_t seq_len) {
    RunSpec r{"llama-3.1-405b", kTeton.c_str(), 64, micro_batch, core::Checkpointing::Full, 1,
              core::KernelImpl::Compile, core::ModelImpl::Torchtitan};
    r.tp = 8;
    r.pp = 8;
    r.schedule = schedule;
    r.virtual_stages = schedule == core::PpSchedule::Interleaved1F1B ? 2 : 1;
    r.grad_accum = 8;
    r.seq_len = seq_len;
    r.async_tp = true;
    r.float8 = true;
    return r;
}

double maxReservedGiB(const Evaluation& e) {
    int64_t most = 0;
    for (const StageFigures& f : e.stages) most = std::max(most, f.reserved_bytes);
    return static_cast<double>(most) / static_cast<double>(core::kGiB);
}

// The throughputs are printed, not asserted: the model reads them 22-39% above the published ones
// (docs/validation-time.md, "3D"), the H100 optimism of the 1D and 2D rows.
TEST(TorchtitanCheckTest, Llama3_405B3dInterleavedGainAndMemory) {
    const core::StepSummary one_f_one_b = predict(run405b3d(core::PpSchedule::OneFOneB, 4, 8192));
    predict(run405b3d(core::PpSchedule::OneFOneB, 1, 32768));
    // The interleaved schedule's gain: published 128 / 100 = 1.28; with 8 micro-batches 1F1B's
    // bubble is 7 of 15 slots, and two stages per rank halve it: (8 + 7) / (8 + 3.5) = 1.30 by hand
    // (with 32 micro-batches it would be 1.10).
    auto interleaved = evaluate(run405b3d(core::PpSchedule::Interleaved1F1B, 4, 8192));
    ASSERT_TRUE(interleaved.ok()) << interleaved.error().message;
    const double gain = interleaved->summary.tokens_per_s_per_gpu / one_f_one_b.tokens_per_s_per_gpu;
    EXPECT_GT(gain, 1.2);
    EXPECT_LT(gain, 1.4);
    // Its memory, the maximum over the GPUs: published 72.7 GiB.
    EXPECT_NEAR(maxReservedGiB(*interleaved) / 72.7, 1.0, 0.05);
}

}  // namespace
}  // namespace shardcast::sim
