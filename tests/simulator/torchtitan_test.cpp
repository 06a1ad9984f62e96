// End-to-end check of the default cost models against a published throughput: torchtitan's
// Llama 3 8B on 64 x A100-80GB (tests/data/reference-cases.json "throughput", from
// pytorch/torchtitan docs/performance.md): FSDP2 FULL_SHARD per block, seq 8192, local batch 1,
// AdamW, bf16 params / fp32 reduce, selective *layer* activation checkpointing: 2904
// tokens/s/GPU, MFU 0.568. torchtitan's llama3_8b.toml of that time sets mode "selective" with
// selective_ac_option "2", which checkpoints every second block: shardcast's "layer:2". The
// defaults come from data sheets and general efficiency figures, not from this case; the check
// allows 15%.
//
// MFU: the published 0.568 = 2904 * 61.07e9 / 312e12 counts 6 * N with the embedding
// (6 * 8,030,261,248 + 12 * 32 * 4096 * 8192 = 61,066,469,376 FLOPs per token). torchtitan's
// convention, which shardcast follows (Model::modelFlopsPerToken), leaves the embedding out
// (train.py passes get_num_params(model, exclude_embedding=True)): 57,914,449,920 per token, so
// the same 2904 tokens/s is MFU 2904 * 57.914e9 / 312e12 = 0.539 by that convention.
#include <cstdio>
#include <memory>

#include <gtest/gtest.h>

#include "core/model_io.hpp"
#include "core/plan.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

// torchtitan's MFU convention for Llama 3 8B at seq 8192 (see above), per token.
constexpr double kTorchtitanFlopsPerToken = 57914449920.0;
constexpr double kA100PeakFlops = 312e12;

core::StepSummary predict(core::Checkpointing ac, int every) {
    auto model = core::resolveModel("llama-3.1-8b");
    EXPECT_TRUE(model.ok()) << model.error().message;
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *core::findGpuPreset("A100-80G");
    plan.cluster.nodes = 8;
    plan.cluster.gpus_per_node = 8;
    plan.training.micro_batch = 1;
    plan.training.seq_len = 8192;
    plan.training.optimizer = core::Optimizer::AdamW;
    plan.training.param_dtype = core::DType::BF16;
    plan.training.reduce_dtype = core::DType::F32;
    plan.training.ac = ac;
    plan.training.ac_every = every;
    plan.sharding.strategy = core::Strategy::FullShard;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    auto evaluated = evaluatePlan(plan, nullptr);
    EXPECT_TRUE(evaluated.ok()) << evaluated.error().message;
    if (!evaluated.ok()) return {};
    const core::StepSummary& s = evaluated->summary;
    std::printf("AC %s: step %.3f s, compute %.3f s, exposed comm %.3f s, AG %.3f s, RS %.3f s, tokens/s/GPU %.0f, "
                "MFU %.3f, HFU %.3f, peak %.2f GiB\n",
                core::acString(ac, every).c_str(), s.step_s, s.compute_s, s.exposed_comm_s, s.all_gather_s,
                s.reduce_scatter_s, s.tokens_per_s_per_gpu, s.mfu, s.hfu,
                static_cast<double>(s.peak_bytes) / static_cast<double>(core::kGiB));
    return s;
}

TEST(TorchtitanCheckTest, Llama3_8BOn64A100WithinFifteenPercent) {
    const core::StepSummary s = predict(core::Checkpointing::Layer, 2);
    EXPECT_NEAR(s.tokens_per_s_per_gpu / 2904.0, 1.0, 0.15);
    EXPECT_NEAR(s.mfu / (2904.0 * kTorchtitanFlopsPerToken / kA100PeakFlops), 1.0, 0.15);
}

// The same run with selective *op* AC (selective_ac_option "op"): 2973 tokens/s/GPU, published MFU
// 0.582 (embedding counted, as above). Per-op SAC recomputes less than every-other-block, so it
// must also be predicted faster than the layer:2 run, as published.
TEST(TorchtitanCheckTest, Llama3_8BOpSacOn64A100WithinFifteenPercent) {
    const core::StepSummary op = predict(core::Checkpointing::Op, 1);
    EXPECT_NEAR(op.tokens_per_s_per_gpu / 2973.0, 1.0, 0.15);
    EXPECT_NEAR(op.mfu / (2973.0 * kTorchtitanFlopsPerToken / kA100PeakFlops), 1.0, 0.15);
    EXPECT_GT(op.tokens_per_s_per_gpu, predict(core::Checkpointing::Layer, 2).tokens_per_s_per_gpu);
}

}  // namespace
}  // namespace shardcast::sim
