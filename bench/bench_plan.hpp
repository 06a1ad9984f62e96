#pragma once
// The plan every benchmark measures: a bundled model, FULL_SHARD per block, sequence 8,192, on
// `nodes` x 8 H100-SXM. A model that does not load ends the program (exit 2).
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"

namespace shardcast::bench {

inline core::Plan benchPlan(const char* model_name, int nodes) {
    auto model = core::resolveModel(model_name);
    if (!model) {
        std::fprintf(stderr, "%s\n", model.error().message.c_str());
        std::exit(2);
    }
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*model));
    plan.model_ref = model_name;
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = 8;
    plan.training.seq_len = 8192;
    plan.sharding.strategy = core::Strategy::FullShard;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    return plan;
}

}  // namespace shardcast::bench
