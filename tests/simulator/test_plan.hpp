#pragma once
// The plan the simulator tests start from: a bundled model on `nodes` x 8 H100-SXM, FULL_SHARD per
// block, `seq_len` tokens per sequence. A model that does not load fails the test.
#include <cstdint>
#include <memory>
#include <utility>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/model/model_scale.hpp"
#include "core/lower/lower.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

namespace shardcast::sim::testing {

// A bundled model with `layers` blocks (core::scaleModel); a model that does not load fails the test.
inline std::shared_ptr<const core::Model> scaledModel(const char* name, int layers) {
    auto model = core::resolveModel(name);
    EXPECT_TRUE(model.ok()) << model.error().message;
    core::ModelScale scale;
    scale.layers = layers;
    auto scaled = core::scaleModel(*model, scale);
    EXPECT_TRUE(scaled.ok()) << scaled.error().message;
    return std::make_shared<const core::Model>(std::move(*scaled));
}

inline core::Plan h100Plan(const char* model, int nodes, int64_t seq_len) {
    auto m = core::resolveModel(model);
    EXPECT_TRUE(m.ok()) << m.error().message;
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*m));
    plan.model_ref = model;
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = seq_len;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    return plan;
}

// A pipeline-parallel plan: Llama-3.1-8B cut to `layers` blocks on `gpus` H100-SXM of one node,
// FULL_SHARD per block, micro-batch 1 of 2,048 tokens, `grad_accum` micro-batches through `pp`
// pipeline ranks of `virtual_stages` stages each.
inline core::Plan ppPlan(int layers, int pp, int grad_accum, core::PpSchedule schedule, int gpus = 8,
                         int virtual_stages = 1) {
    core::Plan plan;
    plan.model = scaledModel("llama-3.1-8b", layers);
    plan.model_ref = "llama-3.1-8b";
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = gpus;
    plan.training.micro_batch = 1;
    plan.training.seq_len = 2048;
    plan.training.grad_accum = grad_accum;
    plan.sharding.strategy = core::Strategy::FullShard;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    plan.sharding.pp = pp;
    plan.sharding.pp_schedule = schedule;
    plan.sharding.pp_virtual_stages = virtual_stages;
    return plan;
}

// The Program of a plan that validates and lowers (a failure fails the test).
inline core::Program loweredProgram(const core::Plan& plan) {
    core::Program p;
    auto mesh = core::validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    if (!mesh) return p;
    auto st = core::lower(plan, *mesh, p);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    return p;
}

// Pipeline rank `rank`'s Program of a plan that validates (a failure fails the test).
inline core::Program stageProgram(const core::Plan& plan, int rank) {
    core::Program p;
    auto mesh = core::validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    if (!mesh) return p;
    core::Lowerer lowerer;
    auto st = lowerer.lowerStage(plan, *mesh, rank, p);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    return p;
}

}  // namespace shardcast::sim::testing
