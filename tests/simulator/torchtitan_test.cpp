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
};

core::StepSummary predict(const RunSpec& r) {
    auto model = core::resolveModel(r.model);
    EXPECT_TRUE(model.ok()) << model.error().message;
    auto gpu = core::resolveGpu(r.gpu);
    EXPECT_TRUE(gpu.ok()) << gpu.error().message;
    if (!model.ok() || !gpu.ok()) return {};
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = r.model;
    plan.cluster.gpu = *gpu;
    plan.cluster.nodes = r.nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.micro_batch = r.micro_batch;
    plan.training.seq_len = 8192;
    plan.training.optimizer = core::Optimizer::AdamW;
    plan.training.param_dtype = core::DType::BF16;
    plan.training.reduce_dtype = core::DType::F32;
    plan.training.ac = r.ac;
    plan.training.ac_every = r.every;
    plan.training.kernels = r.kernels;
    plan.training.impl = r.impl;
    plan.sharding.strategy = core::Strategy::FullShard;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    auto evaluated = evaluatePlan(plan, nullptr);
    EXPECT_TRUE(evaluated.ok()) << evaluated.error().message;
    if (!evaluated.ok()) return {};
    const core::StepSummary& s = evaluated->summary;
    std::printf("%s on %d x %s, impl %s, AC %s, kernels %s: step %.3f s, compute %.3f s, exposed comm %.3f s, "
                "tokens/s/GPU %.0f, MFU %.3f, HFU %.3f, peak %.2f GiB\n",
                r.model, r.nodes * 8, gpu->name.c_str(), std::string(core::modelImplName(r.impl)).c_str(),
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

}  // namespace
}  // namespace shardcast::sim
