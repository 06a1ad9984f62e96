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

// accelerate's YAML and HF Trainer's JSON carry the FSDP settings; the model, the batch and the
// rest come from the flags given beside --from-config, as a user would give them again.
using Writer = core::Result<std::string> (*)(const core::Plan&, const core::Mesh&);

void expectRoundTripWith(const core::PlanOverrides& given, Writer write, bool yaml) {
    const core::Plan plan = build(given);
    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message;
    auto text = write(plan, *mesh);
    ASSERT_TRUE(text.ok()) << text.error().message;
    auto back = yaml ? importAccelerateYaml(*text, "emitted.yaml") : importHfTrainerJson(*text, "emitted.json");
    ASSERT_TRUE(back.ok()) << back.error().message << "\n" << *text;
    // The fields the format does not carry, given again as flags over what it read.
    core::PlanOverrides again = back->overrides;
    again.model = given.model;
    again.seq_len = given.seq_len;
    if (yaml) {
        again.micro_batch = given.micro_batch;
        again.grad_accum = given.grad_accum;
        again.optimizer = given.optimizer;
        again.clip_grad_norm = given.clip_grad_norm;
    } else {
        again.nodes = given.nodes;
        again.gpus_per_node = given.gpus_per_node;
        if (given.shard_size) again.shard_size = given.shard_size;
    }
    EXPECT_EQ(core::planToJson(build(again)).dump(2), core::planToJson(plan).dump(2)) << *text;
}

core::PlanOverrides hfPlan(const char* model, int64_t nodes) {
    core::PlanOverrides o;
    o.model = model;
    o.nodes = nodes;
    o.reduce_dtype = "bf16";  // accelerate reduces in the compute dtype
    o.micro_batch = 2;
    o.grad_accum = 4;
    o.seq_len = 2048;
    return o;
}

TEST(AccelerateExportTest, PlansRoundTrip) {
    // FSDP1 per block with BACKWARD_POST and forward prefetch, checkpointing, compile.
    core::PlanOverrides fsdp1 = hfPlan("llama-3.1-8b", 1);
    fsdp1.fsdp = 1;
    fsdp1.backward_prefetch = "post";
    fsdp1.forward_prefetch = "true";
    fsdp1.ac = "full";
    fsdp1.kernels = "compile";
    fsdp1.optimizer = "adamw-fused";
    fsdp1.clip_grad_norm = 1.0;
    expectRoundTripWith(fsdp1, accelerateYaml, true);
    // FSDP2 HSDP 2 x 8 over two nodes, reshard_after_forward false, CPU offload.
    core::PlanOverrides hsdp = hfPlan("llama-3.1-8b", 2);
    hsdp.fsdp = 2;
    hsdp.strategy = "HYBRID_SHARD";
    hsdp.shard_size = 8;
    hsdp.reshard_after_forward = "false";
    hsdp.offload = "cpu";
    expectRoundTripWith(hsdp, accelerateYaml, true);
    // FSDP1 SHARD_GRAD_OP by size, fp32.
    core::PlanOverrides size = hfPlan("gpt2", 1);
    size.fsdp = 1;
    size.strategy = "SHARD_GRAD_OP";
    size.wrap = "min-params:1000000";
    size.param_dtype = "fp32";
    size.reduce_dtype = "fp32";
    expectRoundTripWith(size, accelerateYaml, true);
}

TEST(HfTrainerExportTest, PlansRoundTrip) {
    core::PlanOverrides fsdp1 = hfPlan("llama-3.1-8b", 1);
    fsdp1.fsdp = 1;
    fsdp1.backward_prefetch = "none";
    fsdp1.ac = "full";
    fsdp1.optimizer = "adamw-fused";
    fsdp1.clip_grad_norm = 1.0;
    expectRoundTripWith(fsdp1, hfTrainerJson, false);
    // hybrid_shard within each of 2 nodes, offload, whole model, foreach AdamW, compile.
    core::PlanOverrides hybrid = hfPlan("llama-3.1-8b", 2);
    hybrid.fsdp = 1;
    hybrid.strategy = "HYBRID_SHARD";
    hybrid.shard_size = 8;
    hybrid.offload = "cpu";
    hybrid.wrap = "whole";
    hybrid.optimizer = "adamw";
    hybrid.kernels = "compile";
    hybrid.clip_grad_norm = 0.5;
    expectRoundTripWith(hybrid, hfTrainerJson, false);
    // FSDP2 by size, fp16.
    core::PlanOverrides fsdp2 = hfPlan("gpt2", 1);
    fsdp2.fsdp = 2;
    fsdp2.wrap = "min-params:2000000";
    fsdp2.param_dtype = "fp16";
    fsdp2.reduce_dtype = "fp16";
    fsdp2.optimizer = "sgd";
    expectRoundTripWith(fsdp2, hfTrainerJson, false);
}

TEST(AccelerateExportTest, WhatAccelerateCannotExpressIsRefusedByField) {
    auto refused = [](const core::PlanOverrides& o, Writer write, const std::string& prefix) {
        const core::Plan plan = build(o);
        auto mesh = core::validatePlan(plan);
        ASSERT_TRUE(mesh.ok()) << mesh.error().message;
        auto text = write(plan, *mesh);
        ASSERT_FALSE(text.ok()) << prefix;
        EXPECT_EQ(text.error().message.rfind(prefix, 0), 0u) << text.error().message;
    };
    core::PlanOverrides o = hfPlan("llama-3.1-8b", 1);
    core::PlanOverrides reduce = o;
    reduce.reduce_dtype = "fp32";
    refused(reduce, accelerateYaml, "--emit accelerate: training.reduce_dtype ");
    refused(reduce, hfTrainerJson, "--emit hf-trainer: training.reduce_dtype ");
    core::PlanOverrides tp = o;
    tp.tp = 2;
    refused(tp, accelerateYaml, "--emit accelerate: sharding.tp ");
    core::PlanOverrides layer = o;
    layer.ac = "layer:2";
    refused(layer, hfTrainerJson, "--emit hf-trainer: training.ac ");
    core::PlanOverrides hsdp = o;
    hsdp.nodes = 2;
    hsdp.fsdp = 1;
    hsdp.strategy = "HYBRID_SHARD";
    hsdp.shard_size = 4;
    refused(hsdp, hfTrainerJson, "--emit hf-trainer: sharding.strategy ");
    refused(hsdp, accelerateYaml, "--emit accelerate: sharding.shard_size ");
    core::PlanOverrides momentum = o;
    momentum.optimizer = "sgd-momentum";
    refused(momentum, hfTrainerJson, "--emit hf-trainer: training.optimizer ");
}

}  // namespace
}  // namespace shardcast::configs
