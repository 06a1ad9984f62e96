// Guards the evaluation chain's figures while its code is made faster: a matrix of plans (models,
// strategies, FSDP versions, AC modes, accumulation, offload, GPUs, a power-capped profile) is
// evaluated with every output on and compared field by field with tests/data/evaluation-fingerprints.json,
// which the chain wrote before the speed work (main after the alloc merge, be7ead8). Scalars are
// compared as numbers; the Program, the timeline, the timed memory curve and the summary (per-unit
// times included) as FNV-1a digests of their JSON, so a change of any task's time or any byte fails;
// the caching allocator's peaks and fragmentation and the fit verdict as numbers.
//
// A change that moves figures on purpose regenerates the file and says why in its commit:
//   SHARDCAST_WRITE_FINGERPRINTS=tests/data/evaluation-fingerprints.json build/bin/evaluation_fingerprint_test
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/model/model_io.hpp"
#include "core/program/program_io.hpp"
#include "core/results/step_io.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

using nlohmann::json;

#ifndef SHARDCAST_SOURCE_DIR
#error "SHARDCAST_SOURCE_DIR must name the source tree"
#endif

// FNV-1a, 64 bit (http://www.isthe.com/chongo/tech/comp/fnv/): offset basis and prime from there.
std::string fnv1a(const std::string& text) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : text) {
        h ^= c;
        h *= 1099511628211ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

struct Case {
    std::string name;
    core::Plan plan;
    bool power_capped = false;  // H100 at 500 W: the clock scale below 1 (GpuSpec::computeClockScale)
};

std::shared_ptr<const core::Model> model(const char* name) {
    auto m = core::resolveModel(name);
    EXPECT_TRUE(m.ok()) << name << ": " << m.error().message;
    return std::make_shared<const core::Model>(std::move(*m));
}

std::vector<Case> cases() {
    struct Variant {
        const char* model;
        const char* gpu;
        int nodes;
        core::Strategy strategy;
        int fsdp;
        core::Checkpointing ac;
        int ac_every;
        int64_t micro_batch, seq_len, grad_accum;
        core::WrapKind wrap;
        int wrap_k;
        core::Offload offload;
        core::KernelImpl kernels;
        core::AttentionKernel attention;
        bool no_sync;
        bool power_capped;
    };
    using S = core::Strategy;
    using C = core::Checkpointing;
    using W = core::WrapKind;
    using K = core::KernelImpl;
    using A = core::AttentionKernel;
    const core::Offload none = core::Offload::None, cpu = core::Offload::Cpu;
    const std::vector<Variant> variants = {
        {"llama-3.1-8b", "H100-SXM", 1, S::FullShard, 2, C::None, 1, 1, 8192, 1, W::Block, 1, none, K::Eager, A::Flash, false, false},
        {"llama-3.1-8b", "H100-SXM", 1, S::FullShard, 2, C::Full, 1, 2, 4096, 2, W::Block, 1, none, K::Eager, A::Flash, false, false},
        {"llama-3.1-8b", "H100-SXM", 1, S::ShardGradOp, 2, C::Op, 1, 1, 8192, 4, W::EveryK, 2, none, K::Fused, A::Flash, true, false},
        {"llama-3.1-8b", "H100-SXM", 2, S::HybridShard, 2, C::Layer, 2, 1, 4096, 1, W::Block, 1, none, K::Compile, A::Flash, false, true},
        {"llama-3.1-8b", "A100-80G", 1, S::FullShard, 1, C::Full, 1, 1, 4096, 2, W::Block, 1, none, K::Eager, A::Flash, false, false},
        {"llama-3.1-8b", "H100-SXM", 1, S::FullShard, 2, C::None, 1, 1, 2048, 1, W::Block, 1, cpu, K::Eager, A::Flash, false, false},
        {"llama-2-7b", "A100-40G", 2, S::HybridShardZero2, 1, C::AttnCore, 1, 1, 2048, 2, W::Block, 1, none, K::Eager, A::Eager, false, false},
        {"gpt2", "A100-40G", 1, S::NoShard, 2, C::None, 1, 4, 1024, 3, W::Whole, 1, none, K::Eager, A::Eager, false, false},
        {"mixtral-8x7b", "H100-SXM", 2, S::HybridShard, 2, C::Full, 1, 1, 4096, 1, W::Block, 1, none, K::Eager, A::Flash, false, false},
        {"llama-3.1-70b", "H100-SXM", 4, S::FullShard, 2, C::Op, 1, 1, 8192, 1, W::Block, 1, none, K::Eager, A::Flash, false, false},
        {"qwen2-7b", "H200", 1, S::ShardGradOp, 1, C::None, 1, 2, 2048, 1, W::EveryK, 4, none, K::Fused, A::Flash, false, false},
    };
    std::vector<Case> out;
    for (const Variant& v : variants) {
        Case c;
        c.name = std::string(v.model) + "/" + v.gpu + "x" + std::to_string(v.nodes * 8) + "/" +
                 std::string(core::strategyName(v.strategy)) + "/fsdp" + std::to_string(v.fsdp) + "/ac" +
                 core::acString(v.ac, v.ac_every) + "/mb" + std::to_string(v.micro_batch) + "x" +
                 std::to_string(v.seq_len) + "/accum" + std::to_string(v.grad_accum) +
                 (v.offload == cpu ? "/offload" : "") + (v.no_sync ? "/no_sync" : "") +
                 "/" + std::string(core::kernelImplName(v.kernels)) + "/" + std::string(core::attentionName(v.attention)) +
                 (v.power_capped ? "/500W" : "");
        core::Plan& p = c.plan;
        p.model = model(v.model);
        p.model_ref = v.model;
        auto gpu = core::findGpuPreset(v.gpu);
        EXPECT_TRUE(gpu.has_value()) << v.gpu;
        if (gpu) p.cluster.gpu = *gpu;
        p.cluster.nodes = v.nodes;
        p.cluster.gpus_per_node = 8;
        p.training.micro_batch = v.micro_batch;
        p.training.seq_len = v.seq_len;
        p.training.grad_accum = v.grad_accum;
        p.training.no_sync = v.no_sync;
        p.training.ac = v.ac;
        p.training.ac_every = v.ac_every;
        p.training.offload = v.offload;
        p.training.kernels = v.kernels;
        p.training.attention = v.attention;
        p.sharding.strategy = v.strategy;
        p.sharding.fsdp_version = v.fsdp;
        p.sharding.wrap.kind = v.wrap;
        p.sharding.wrap.k = v.wrap_k;
        c.power_capped = v.power_capped;
        out.push_back(std::move(c));
    }
    return out;
}

json fingerprint(const Evaluation& e) {
    json j;
    j["tasks"] = e.program.size();
    j["step_ns"] = e.timeline.step_ns;
    j["step_s"] = e.summary.step_s;
    j["mfu"] = e.summary.mfu;
    j["hfu"] = e.summary.hfu;
    j["exposed_comm_s"] = e.summary.exposed_comm_s;
    j["peak_bytes"] = e.memory.peak_bytes;
    j["peak_task"] = e.memory.peak_task;
    j["at_peak"] = e.memory.at_peak;
    j["max_per_category"] = e.memory.max_per_category;
    j["issue_order_peak_bytes"] = e.issue_order_peak_bytes;
    j["model_states"] = {e.memory.model_states.params, e.memory.model_states.grads, e.memory.model_states.optimizer};
    j["comm_bytes"] = {e.comm.all_gather_bytes, e.comm.reduce_scatter_bytes, e.comm.all_reduce_bytes};
    j["fits"] = e.fit.fits;
    j["at_risk"] = e.fit.at_risk;
    j["fit_reserved_bytes"] = e.fit.reserved_bytes;
    const core::AllocatorStats& a = e.reserved.stats;
    j["reserved"] = {a.peak_allocated_bytes, a.peak_reserved_bytes, a.fragmentation_at_reserved_peak,
                     a.max_fragmentation_bytes, a.out_of_memory};
    j["program_fnv"] = fnv1a(core::programToJson(e.program).dump());
    j["timeline_fnv"] = fnv1a(core::timelineToJson(e.timeline).dump());
    j["timed_memory_fnv"] = fnv1a(core::timedMemoryToJson(e.timed).dump());
    j["summary_fnv"] = fnv1a(core::stepSummaryToJson(e.summary).dump());
    return j;
}

TEST(EvaluationFingerprintTest, FiguresMatchTheCommittedOnes) {
    const std::string path = std::string(SHARDCAST_SOURCE_DIR) + "/tests/data/evaluation-fingerprints.json";
    EvaluationOptions options;
    options.record_curve = true;
    options.per_unit = true;
    options.issue_order_memory = true;
    Evaluator evaluator;  // one evaluator for all cases: reused buffers must not leak between plans
    Evaluation e;
    json got = json::object();
    for (const Case& c : cases()) {
        HardwareProfile profile = HardwareProfile::fromCluster(c.plan.cluster);
        if (c.power_capped) profile.gpu.power_limit_w = 500;
        auto st = evaluator.evaluate(c.plan, &profile, options, e);
        ASSERT_TRUE(st.ok()) << c.name << ": " << st.error().message;
        got[c.name] = fingerprint(e);
    }

    if (const char* write = std::getenv("SHARDCAST_WRITE_FINGERPRINTS")) {
        std::ofstream(write) << got.dump(2) << "\n";
        GTEST_SKIP() << "wrote " << write;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << "cannot read " << path;
    const json want = json::parse(in);
    ASSERT_EQ(want.size(), got.size()) << "cases in " << path;
    for (const auto& [name, fields] : want.items()) {
        ASSERT_TRUE(got.contains(name)) << "case " << name << " is no longer evaluated";
        for (const auto& [field, value] : fields.items()) {
            EXPECT_EQ(got[name][field], value) << name << ": " << field;
        }
        EXPECT_EQ(got[name].size(), fields.size()) << name << ": fields";
    }
}

// An Evaluator keeps figures between plans (kernel durations per span while Program::ops is
// unchanged, the model's active ops, the work bound): the same plan on another profile, or after
// another plan, must give what a fresh Evaluator gives.
TEST(EvaluationFingerprintTest, ReusedEvaluatorMatchesAFreshOne) {
    const std::vector<Case> all = cases();
    const core::Plan& plan = all[0].plan;
    const HardwareProfile h100 = HardwareProfile::fromCluster(plan.cluster);
    HardwareProfile capped = h100;
    capped.gpu.power_limit_w = 500;  // slower kernels, same Program
    HardwareProfile slow_nvlink = h100;
    slow_nvlink.gpu.nvlink_bytes_per_s /= 4;  // same kernels, slower collectives
    EvaluationOptions options;
    options.record_curve = true;
    Evaluator reused;
    Evaluation a;
    for (const HardwareProfile* p : std::vector<const HardwareProfile*>{&h100, &capped, &slow_nvlink, &h100}) {
        ASSERT_TRUE(reused.evaluate(all[1].plan, p, options, a).ok());  // another plan first
        ASSERT_TRUE(reused.evaluate(plan, p, options, a).ok());
        Evaluator fresh;
        Evaluation b;
        ASSERT_TRUE(fresh.evaluate(plan, p, options, b).ok());
        EXPECT_EQ(a.timeline, b.timeline);
        EXPECT_EQ(a.timed, b.timed);
        EXPECT_EQ(a.summary, b.summary);
        EXPECT_EQ(a.reserved, b.reserved);
    }
    // Plans of one model in a row: another sequence length, a frozen (LoRA-like) variant whose op
    // costs differ, and the plain plan again, each against a fresh Evaluator.
    core::Plan other_seq = plan;
    other_seq.training.seq_len = 4096;
    core::Plan frozen = plan;
    frozen.training.frozen_regex = "mlp";
    for (const core::Plan* p : std::vector<const core::Plan*>{&plan, &other_seq, &frozen, &plan, &frozen, &other_seq}) {
        ASSERT_TRUE(reused.evaluate(*p, &h100, options, a).ok());
        Evaluator fresh;
        Evaluation b;
        ASSERT_TRUE(fresh.evaluate(*p, &h100, options, b).ok());
        EXPECT_EQ(a.timeline, b.timeline);
        EXPECT_EQ(a.timed, b.timed);
        EXPECT_EQ(a.summary, b.summary);
        EXPECT_EQ(a.reserved, b.reserved);
    }
    // The capped profile is slower: the kept durations were not reused across profiles.
    Evaluation c;
    ASSERT_TRUE(reused.evaluate(plan, &capped, options, c).ok());
    ASSERT_TRUE(reused.evaluate(plan, &h100, options, a).ok());
    EXPECT_GT(c.timeline.step_ns, a.timeline.step_ns);
}

// A per-block spec whose blocks all take one mode is that whole-model mode, byte for byte: the
// same Program, timeline, memory curve and summary (Llama-3.1-8B, 32 blocks, FULL_SHARD on 8).
TEST(EvaluationFingerprintTest, OneModePerBlockIsTheWholeModelMode) {
    for (core::Checkpointing mode : {core::Checkpointing::Full, core::Checkpointing::Op, core::Checkpointing::None}) {
        core::Plan whole;
        whole.model = model("llama-3.1-8b");
        whole.model_ref = "llama-3.1-8b";
        whole.cluster.gpu = *core::findGpuPreset("H100-SXM");
        whole.cluster.nodes = 1;
        whole.cluster.gpus_per_node = 8;
        whole.training.seq_len = 8192;
        whole.training.ac = mode;
        core::Plan per_block = whole;
        per_block.training.ac = core::Checkpointing::Blocks;
        per_block.training.ac_blocks = {{mode, 20}, {mode, 12}};  // as code may build it, unmerged
        EvaluationOptions options;
        options.record_curve = true;
        options.per_unit = true;
        const HardwareProfile profile = HardwareProfile::fromCluster(whole.cluster);
        auto a = evaluatePlan(whole, &profile, options);
        auto b = evaluatePlan(per_block, &profile, options);
        ASSERT_TRUE(a.ok()) << a.error().message;
        ASSERT_TRUE(b.ok()) << b.error().message;
        EXPECT_EQ(fingerprint(*a), fingerprint(*b)) << core::checkpointingName(mode);
        EXPECT_EQ(core::programToJson(a->program).dump(), core::programToJson(b->program).dump());
    }
}

}  // namespace
}  // namespace shardcast::sim
