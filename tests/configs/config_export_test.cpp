// Plans written as torchtitan TOML (configs/config_export.hpp) read back to the same plan through
// configs/config_import.hpp, and plans torchtitan cannot express refused by field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "configs/config_export.hpp"
#include "configs/config_import.hpp"
#include "core/plan/plan.hpp"

namespace shardcast::configs {
namespace {

core::Plan build(const core::PlanOverrides& o) {
    auto plan = core::buildPlan(o);
    EXPECT_TRUE(plan.ok()) << plan.error().message;
    return *plan;
}

// Writes `plan` as torchtitan TOML, reads it back (the GPUs per node from the plan: the TOML has
// only the mesh) and expects the very same plan file.
void expectRoundTrip(const core::Plan& plan) {
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    auto toml = torchtitanToml(plan, *mesh);
    ASSERT_TRUE(toml.ok()) << toml.error().message;
    ConfigContext context;
    context.gpus_per_node = plan.cluster.gpus_per_node;
    auto back = importTorchtitanToml(*toml, "emitted.toml", context);
    ASSERT_TRUE(back.ok()) << back.error().message << "\n" << *toml;
    const core::Plan read = build(back->overrides);
    EXPECT_EQ(core::planToJson(read).dump(2), core::planToJson(plan).dump(2)) << *toml;
}

core::PlanOverrides torchtitanPlan(const char* model, int64_t nodes) {
    core::PlanOverrides o;
    o.model = model;
    o.nodes = nodes;
    o.impl = "torchtitan";
    o.clip_grad_norm = 1.0;  // torchtitan's training.max_norm default: it clips every step
    return o;
}

TEST(TorchtitanExportTest, PlansRoundTrip) {
    // 405B: tp 8 with async TP under compile, FULL_SHARD over 16, full checkpointing.
    core::PlanOverrides tp = torchtitanPlan("llama-3.1-405b", 16);
    tp.tp = 8;
    tp.async_tp = "true";
    tp.kernels = "compile";
    tp.ac = "full";
    tp.micro_batch = 2;
    tp.seq_len = 8192;
    expectRoundTrip(build(tp));
    // 8B: HSDP 2 x 4, tp 2, pp 4 Interleaved1F1B (2 stages per rank), per-op checkpointing, DCP saves.
    core::PlanOverrides three_d = torchtitanPlan("llama-3.1-8b", 8);
    three_d.strategy = "HYBRID_SHARD";
    three_d.shard_size = 4;
    three_d.tp = 2;
    three_d.pp = 4;
    three_d.pp_schedule = "Interleaved1F1B";
    three_d.pp_virtual_stages = 2;
    three_d.grad_accum = 8;
    three_d.ac = "op";
    three_d.checkpoint = "sharded";
    three_d.checkpoint_every = 100;
    expectRoundTrip(build(three_d));
    // 405B: pp 8 with 4 stages per rank, written as pipeline_parallel_layers_per_stage 4 ((126 + 2) / 32).
    core::PlanOverrides looped = torchtitanPlan("llama-3.1-405b", 16);
    looped.pp = 8;
    looped.pp_schedule = "Interleaved1F1B";
    looped.pp_virtual_stages = 4;
    looped.grad_accum = 8;
    looped.ac = "layer:2";
    looped.reshard_after_forward = "false";
    const core::Plan looped_plan = build(looped);
    expectRoundTrip(looped_plan);
    auto mesh = core::validatePlan(looped_plan);
    ASSERT_TRUE(mesh.ok());
    EXPECT_NE(torchtitanToml(looped_plan, *mesh)->find("pipeline_parallel_layers_per_stage = 4\n"), std::string::npos);
    // DDP over 8 with CPU offload: replicate 8 x shard 1.
    core::PlanOverrides ddp = torchtitanPlan("llama-3.1-8b", 1);
    ddp.strategy = "NO_SHARD";
    ddp.ac = "none";
    ddp.grad_accum = 4;
    ddp.clip_grad_norm = 0.25;
    expectRoundTrip(build(ddp));
}

void expectRefused(const core::PlanOverrides& o, const std::string& field) {
    const core::Plan plan = build(o);
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << field << ": " << mesh.error().message;
    auto toml = torchtitanToml(plan, *mesh);
    ASSERT_FALSE(toml.ok()) << field;
    EXPECT_EQ(toml.error().message.rfind("--emit torchtitan: " + field + " ", 0), 0u) << toml.error().message;
}

TEST(TorchtitanExportTest, WhatTorchtitanCannotExpressIsRefusedByField) {
    core::PlanOverrides o = torchtitanPlan("llama-3.1-8b", 1);
    core::PlanOverrides gpt2 = o;
    gpt2.model = "gpt2";
    gpt2.impl = "hf";
    expectRefused(gpt2, "model");
    core::PlanOverrides unclipped = o;
    unclipped.clip_grad_norm = 0.0;
    expectRefused(unclipped, "training.clip_grad_norm");
    core::PlanOverrides wrap = o;
    wrap.wrap = "every:2";
    expectRefused(wrap, "sharding.wrap");
    core::PlanOverrides fsdp1 = o;
    fsdp1.fsdp = 1;
    expectRefused(fsdp1, "sharding.fsdp");
    core::PlanOverrides ac = o;
    ac.ac = "attn-core";
    expectRefused(ac, "training.ac");
    core::PlanOverrides full = o;
    full.checkpoint = "full";
    expectRefused(full, "checkpoint.mode");
    core::PlanOverrides partial = o;
    partial.nodes = 2;
    partial.reshard_after_forward = "8";
    expectRefused(partial, "sharding.reshard_after_forward");
    core::PlanOverrides no_sync = o;
    no_sync.grad_accum = 2;
    no_sync.no_sync = true;
    expectRefused(no_sync, "training.no_sync");
}

}  // namespace
}  // namespace shardcast::configs
