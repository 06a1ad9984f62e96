// validateProgram: every lowered Program keeps the contracts of core/program/program.hpp, and each check
// rejects a Program broken on purpose with a message that names the task.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "core/program/program_check.hpp"
#include "lowered_program.hpp"

using namespace shardcast::core;

namespace {

std::shared_ptr<const Model> bundled(const char* name) {
    auto m = resolveModel(name);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return std::make_shared<const Model>(std::move(*m));
}

Plan makePlan(std::shared_ptr<const Model> model, Strategy strategy) {
    Plan plan;
    plan.model = std::move(model);
    plan.model_ref = plan.model->name;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = 2;  // 2 x 4: hybrid strategies shard inside a node, replicate across
    plan.cluster.gpus_per_node = 4;
    plan.training.seq_len = 2048;
    plan.sharding.strategy = strategy;
    return plan;
}

using shardcast::core::testing::lowered;

struct MatrixTotals {
    int programs = 0;
    int64_t tasks = 0, buffers = 0;
};

// Every strategy x FSDP version x AC mode x offload x no_sync (grad_accum 2); NO_SHARD has no
// CPU offload: 180 plans.
void validateMatrix(const char* model_name, MatrixTotals& totals) {
    auto model = bundled(model_name);
    for (Strategy s : {Strategy::NoShard, Strategy::ShardGradOp, Strategy::FullShard, Strategy::HybridShard,
                       Strategy::HybridShardZero2}) {
        for (int fsdp : {1, 2}) {
            for (const char* ac : {"none", "full", "layer:2", "op", "attn-core"}) {
                for (Offload offload : {Offload::None, Offload::Cpu}) {
                    if (s == Strategy::NoShard && offload == Offload::Cpu) continue;  // not a valid plan
                    for (bool no_sync : {false, true}) {
                        Plan plan = makePlan(model, s);
                        plan.sharding.fsdp_version = fsdp;
                        const auto spec = parseAcSpec(ac);
                        ASSERT_TRUE(spec.has_value());
                        plan.training.ac = spec->mode;
                        plan.training.ac_every = spec->every;
                        plan.training.offload = offload;
                        plan.training.grad_accum = 2;
                        plan.training.no_sync = no_sync;
                        const Program p = lowered(plan);
                        const Status v = validateProgram(p);
                        EXPECT_TRUE(v.ok()) << model_name << ' ' << strategyName(s) << " fsdp" << fsdp << " ac=" << ac
                                            << " offload=" << offloadName(offload) << " no_sync=" << no_sync << ": "
                                            << (v.ok() ? "" : v.error().message);
                        ++totals.programs;
                        totals.tasks += p.size();
                        totals.buffers += p.buffer_count;
                    }
                }
            }
        }
    }
}

}  // namespace

TEST(ProgramCheckTest, EveryLoweredProgramIsValid) {
    for (const char* name : {"llama-3.1-8b", "gpt2", "mixtral-8x7b"}) {
        MatrixTotals totals;
        validateMatrix(name, totals);
        EXPECT_EQ(totals.programs, 180);
        std::cout << "[ validated ] " << name << ": " << totals.programs << " programs, " << totals.tasks << " tasks, "
                  << totals.buffers << " buffers\n";
    }
}

namespace {

// A valid HSDP Program with offload off: groups, gathers, reductions, casts, the optimizer step.
const Program& baseProgram() {
    static const Program p = [] {
        Plan plan = makePlan(bundled("pythia-160m"), Strategy::HybridShard);
        plan.training.grad_accum = 2;
        return lowered(plan);
    }();
    return p;
}

enum class Where { Start, Peak, End };

Span spanOf(const Task& t, Where w) {
    return w == Where::Start ? t.mem_start : w == Where::Peak ? t.mem_peak : t.mem_end;
}

struct EventRef {
    int32_t task = -1;
    uint32_t index = 0;  // into Program::mem
};

// The first event (in issue order) that `pred` accepts.
EventRef findEvent(const Program& p, const std::function<bool(int32_t, Where, const MemEvent&)>& pred) {
    for (int32_t id = 0; id < p.size(); ++id) {
        for (Where w : {Where::Start, Where::Peak, Where::End}) {
            const Span s = spanOf(p.tasks[static_cast<size_t>(id)], w);
            for (uint32_t i = 0; i < s.count; ++i) {
                if (pred(id, w, p.mem[s.offset + i])) return {id, s.offset + i};
            }
        }
    }
    ADD_FAILURE() << "no such event in the base program";
    return {};
}

int32_t findTask(const Program& p, const std::function<bool(const Task&)>& pred) {
    for (int32_t id = 0; id < p.size(); ++id)
        if (pred(p.tasks[static_cast<size_t>(id)])) return id;
    ADD_FAILURE() << "no such task in the base program";
    return 0;
}

bool isFree(int32_t, Where w, const MemEvent& e) { return w != Where::Peak && e.bytes < 0; }
bool isAlloc(int32_t, Where w, const MemEvent& e) { return w != Where::Peak && e.bytes > 0; }

struct BrokenCase {
    const char* name;
    // Breaks the program; returns the task the message must name.
    std::function<int32_t(Program&)> breakIt;
    const char* expected;  // part of the message
};

std::vector<BrokenCase> brokenCases() {
    return {
        {"dependency on a later task",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.deps.count > 0; });
             p.deps[p.tasks[static_cast<size_t>(id)].deps.offset] = id + 1;
             return id;
         },
         "which is not an earlier task"},
        {"deps span outside the pool",
         [](Program& p) {
             p.tasks[3].deps = Span{static_cast<uint32_t>(p.deps.size()), 1};
             return 3;
         },
         "lies outside the deps pool"},
        {"mem span outside the pool",
         [](Program& p) {
             const int32_t id = p.size() - 1;
             p.tasks.back().mem_end = Span{static_cast<uint32_t>(p.mem.size() - 1), 2};
             return id;
         },
         "mem_end span"},
        {"unit out of range",
         [](Program& p) {
             p.tasks[2].unit = static_cast<int32_t>(p.units.size());
             return 2;
         },
         "is out of range"},
        {"micro-batch out of range",
         [](Program& p) {
             p.tasks[2].micro_batch = static_cast<int16_t>(p.micro_batches);
             return 2;
         },
         "micro_batch 2 is out of range"},
        {"host wait on a later task",
         [](Program& p) {
             p.tasks[4].host_wait = 4;
             return 4;
         },
         "host_wait 4 is not an earlier task"},
        {"collective without a group",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::AllReduce; });
             p.tasks[static_cast<size_t>(id)].group = static_cast<int32_t>(p.groups.size());
             return id;
         },
         "does not exist"},
        {"group size differs from the group",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::ReduceScatter; });
             ++p.tasks[static_cast<size_t>(id)].group_size;
             return id;
         },
         "differs from the size 4 of its process group"},
        {"group nodes differ from the group",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::AllReduce; });
             p.tasks[static_cast<size_t>(id)].group_nodes = 1;
             return id;
         },
         "group_nodes 1 differs from the 2 nodes"},
        {"compute task naming a group",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::Forward; });
             p.tasks[static_cast<size_t>(id)].group = 0;
             return id;
         },
         "is not a collective"},
        {"free of a buffer not allocated yet",
         [](Program& p) {
             const EventRef e = findEvent(p, isFree);
             p.mem[e.index].buffer = p.buffer_count - 1;  // the optimizer's scratch, made last
             return e.task;
         },
         "which is not allocated yet"},
        {"free of a buffer already freed",
         [](Program& p) {
             const EventRef first = findEvent(p, isFree);
             const MemEvent freed = p.mem[first.index];
             const EventRef later = findEvent(p, [&](int32_t id, Where w, const MemEvent& e) {
                 return id > first.task && w != Where::Peak && e.bytes < 0 && e.category == freed.category;
             });
             p.mem[later.index] = freed;
             return later.task;
         },
         "already freed"},
        {"free of the wrong size",
         [](Program& p) {
             const EventRef e = findEvent(p, isFree);
             p.mem[e.index].bytes -= 2;
             return e.task;
         },
         "allocated with"},
        {"free in the wrong category",
         [](Program& p) {
             const EventRef e = findEvent(p, isFree);
             p.mem[e.index].category = p.mem[e.index].category == MemCategory::Temp ? MemCategory::Activation
                                                                                    : MemCategory::Temp;
             return e.task;
         },
         "allocated as"},
        {"free on the wrong stream",
         [](Program& p) {
             const EventRef e = findEvent(p, isFree);
             p.mem[e.index].stream = p.mem[e.index].stream == Stream::Host ? Stream::Compute : Stream::Host;
             return e.task;
         },
         "stream by task"},
        {"buffer allocated twice",
         [](Program& p) {
             const EventRef first = findEvent(p, isAlloc);
             const EventRef later = findEvent(p, [&](int32_t id, Where w, const MemEvent& e) {
                 return id > first.task && w != Where::Peak && e.bytes > 0;
             });
             p.mem[later.index].buffer = p.mem[first.index].buffer;
             return later.task;
         },
         "already allocated by task"},
        {"allocation on another task's stream",
         [](Program& p) {
             const EventRef e = findEvent(p, isAlloc);
             p.mem[e.index].stream = Stream::Host;
             return e.task;
         },
         "but the task runs on the"},
        {"buffer never freed",
         [](Program& p) {
             // Drop the last task's last free: the buffer it freed stays allocated.
             const EventRef e = findEvent(p, [&](int32_t id, Where w, const MemEvent& ev) {
                 const Task& t = p.tasks[static_cast<size_t>(id)];
                 return w == Where::End && ev.bytes < 0 && t.kind == TaskKind::OptimizerStep;
             });
             const int32_t buffer = p.mem[e.index].buffer;
             --p.tasks.back().mem_end.count;
             p.mem[e.index] = p.mem[p.tasks.back().mem_end.offset + p.tasks.back().mem_end.count];
             // The message names the task that allocated the buffer.
             return findEvent(p, [&](int32_t, Where w, const MemEvent& ev) {
                        return w != Where::Peak && ev.bytes > 0 && ev.buffer == buffer;
                    }).task;
         },
         "that no task frees by the end of the step"},
        {"event of zero bytes",
         [](Program& p) {
             const EventRef e = findEvent(p, isAlloc);
             p.mem[e.index].bytes = 0;
             return e.task;
         },
         "an event of 0 bytes"},
        {"buffer id out of range",
         [](Program& p) {
             const EventRef e = findEvent(p, isAlloc);
             p.mem[e.index].buffer = p.buffer_count;
             return e.task;
         },
         "is out of range"},
        {"timed_after a later task",
         [](Program& p) {
             const EventRef e = findEvent(p, isFree);
             p.mem[e.index].timed_after = e.task + 1;
             return e.task;
         },
         "is not this task or an earlier one"},
        {"scratch reusing an allocated buffer",
         [](Program& p) {
             const EventRef alloc = findEvent(p, isAlloc);
             const EventRef scratch = findEvent(p, [&](int32_t id, Where w, const MemEvent& e) {
                 return id > alloc.task && w == Where::Peak && e.bytes > 0;
             });
             p.mem[scratch.index].buffer = p.mem[alloc.index].buffer;
             return scratch.task;
         },
         "as scratch"},
        {"ops span outside the pool",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::Backward; });
             p.tasks[static_cast<size_t>(id)].ops = Span{static_cast<uint32_t>(p.ops.size()), 1};
             return id;
         },
         "lies outside the ops pool"},
        {"compute task without ops",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::CopyOut; });
             p.tasks[static_cast<size_t>(id)].ops.count = 0;
             return id;
         },
         "a compute task lists no ops"},
        {"collective with ops",
         [](Program& p) {
             const int32_t id = findTask(p, [](const Task& t) { return t.kind == TaskKind::AllGather; });
             p.tasks[static_cast<size_t>(id)].ops = Span{0, 1};
             return id;
         },
         "but is not a compute task"},
        {"GEMM of an empty dimension",
         [](Program& p) {
             const int32_t id = findTask(p, [&](const Task& t) {
                 return t.kind == TaskKind::Forward && p.ops[t.ops.offset + 1].kind == OpShapeKind::Gemm;
             });
             // Give the task its own copy of its ops (spans may be shared), then break one.
             Task& t = p.tasks[static_cast<size_t>(id)];
             const auto offset = static_cast<uint32_t>(p.ops.size());
             for (uint32_t i = 0; i < t.ops.count; ++i) p.ops.push_back(p.ops[t.ops.offset + i]);
             t.ops.offset = offset;
             p.ops[offset + 1].k = 0;
             return id;
         },
         "ops[1] (gemm): m, n, k and batch must be at least 1"},
        {"category below zero in replay",
         [](Program& p) {
             // A backward releases part of its saved activations at its peak; here it releases the
             // whole buffer, over and over, until more than every live activation is gone (each
             // release alone is within the buffer's size).
             const EventRef e = findEvent(p, [&](int32_t id, Where w, const MemEvent& ev) {
                 return p.tasks[static_cast<size_t>(id)].kind == TaskKind::Backward && w == Where::End &&
                        ev.bytes < 0 && ev.category == MemCategory::Activation;
             });
             Task& t = p.tasks[static_cast<size_t>(e.task)];
             const auto offset = static_cast<uint32_t>(p.mem.size());
             for (uint32_t i = 0; i < t.mem_peak.count; ++i) p.mem.push_back(p.mem[t.mem_peak.offset + i]);
             for (int k = 0; k < 10000; ++k) p.mem.push_back(p.mem[e.index]);
             t.mem_peak = Span{offset, static_cast<uint32_t>(p.mem.size()) - offset};
             return e.task;
         },
         "below zero"},
    };
}

}  // namespace

TEST(ProgramCheckTest, BaseProgramIsValid) {
    const Status v = validateProgram(baseProgram());
    EXPECT_TRUE(v.ok()) << (v.ok() ? "" : v.error().message);
}

TEST(ProgramCheckTest, EachCheckRejectsABrokenProgramNamingTheTask) {
    for (const BrokenCase& c : brokenCases()) {
        Program p = baseProgram();
        const int32_t id = c.breakIt(p);
        const Status v = validateProgram(p);
        ASSERT_FALSE(v.ok()) << c.name << ": accepted";
        const Task& t = p.tasks[static_cast<size_t>(id)];
        const bool unit_ok = t.unit >= -1 && t.unit < static_cast<int32_t>(p.units.size());
        const std::string named =
            "task " + std::to_string(id) + " (" + (unit_ok ? p.taskLabel(id) : std::string(taskKindName(t.kind))) + "): ";
        EXPECT_EQ(v.error().message.rfind(named, 0), 0u) << c.name << ": " << v.error().message;
        EXPECT_NE(v.error().message.find(c.expected), std::string::npos) << c.name << ": " << v.error().message;
        std::cout << "[ rejected  ] " << c.name << ": " << v.error().message << '\n';
    }
}

// Header checks name the program field.
TEST(ProgramCheckTest, RejectsABrokenHeader) {
    Program p = baseProgram();
    p.buffer_count = static_cast<int32_t>(p.mem.size()) + 1;
    auto v = validateProgram(p);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().message.find("buffer_count"), std::string::npos) << v.error().message;

    p = baseProgram();
    p.groups[1].size = 3;  // 3 does not divide the world of 8
    v = validateProgram(p);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().message.find("groups[1] (shard)"), std::string::npos) << v.error().message;

    p = baseProgram();
    p.initial[index(MemCategory::OptState)] = -1;
    v = validateProgram(p);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().message.find("initial Opt"), std::string::npos) << v.error().message;
}
