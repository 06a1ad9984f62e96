#pragma once
// The plan the simulator tests start from: a bundled model on `nodes` x 8 H100-SXM, FULL_SHARD per
// block, `seq_len` tokens per sequence. A model that does not load fails the test.
#include <cstdint>
#include <memory>
#include <utility>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "core/model/model_scale.hpp"
#include "core/plan/plan.hpp"

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

}  // namespace shardcast::sim::testing
