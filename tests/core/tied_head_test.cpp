// Rule T1 (core/lower/lower_segments.cpp tiedHeadGrad): an LM head tied to the embedding makes its
// weight gradient first in backward, autograd holds it until the embedding's backward, and the sum
// of the two is a third [vocab, hidden] tensor. Figures worked out by hand for Gemma-7B (vocab
// 256,000, hidden 3,072, the head tied to the embedding): one gradient is 256,000 x 3,072 x 2 B.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/lower/lower.hpp"
#include "core/memory/memory.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "core/program/program.hpp"
#include "tests/core/lowered_program.hpp"

using namespace shardcast::core;

namespace {

constexpr int64_t kVocab = 256000, kHidden = 3072, kT = 2048;
constexpr int64_t kGrad = kVocab * kHidden * 2;  // 1,572,864,000 B in bf16

Program gemma7b(const char* ac, const char* frozen) {
    PlanOverrides o;
    o.model = "gemma-7b";
    o.seq_len = kT;
    o.ac = ac;
    o.hf_mask = "5.x";
    if (frozen) o.frozen = frozen;
    auto plan = buildPlan(o);
    EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
    return plan.ok() ? shardcast::core::testing::lowered(*plan) : Program{};
}

// The root's backward tasks in issue order: the head's segment first, the embedding's last.
std::vector<int32_t> rootBackwards(const Program& p) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < p.tasks.size(); ++i) {
        if (p.tasks[i].kind == TaskKind::Backward && p.tasks[i].unit == 0) out.push_back(static_cast<int32_t>(i));
    }
    return out;
}

// Temp buffers of exactly `bytes` allocated (positive) or freed (negative) at a task's end.
std::vector<int32_t> tempAtEnd(const Program& p, int32_t task, int64_t bytes) {
    std::vector<int32_t> buffers;
    const Span s = p.tasks[static_cast<size_t>(task)].mem_end;
    for (uint32_t i = 0; i < s.count; ++i) {
        const MemEvent& e = p.mem[s.offset + i];
        if (e.category == MemCategory::Temp && e.bytes == bytes) buffers.push_back(e.buffer);
    }
    return buffers;
}

// Weight-sized GEMMs (one operand dimension the vocabulary, one the hidden size) of a task.
int countHeadGemms(const Program& p, int32_t task) {
    int n = 0;
    const Task& t = p.tasks[static_cast<size_t>(task)];
    for (uint32_t i = 0; i < t.ops.count; ++i) {
        const OpShape& op = p.ops[t.ops.offset + i];
        if (op.kind != OpShapeKind::Gemm) continue;
        const bool v = op.m == kVocab || op.n == kVocab || op.k == kVocab;
        const bool h = op.m == kHidden || op.n == kHidden || op.k == kHidden;
        if (v && h) ++n;
    }
    return n;
}

}  // namespace

TEST(TiedHead, HeadGradientHeldFromTheHeadToTheEmbedding) {
    const Program p = gemma7b("full", nullptr);
    const std::vector<int32_t> bwd = rootBackwards(p);
    ASSERT_EQ(bwd.size(), 2u);
    // Allocated when the head's backward ends, freed when the embedding's ends.
    const std::vector<int32_t> made = tempAtEnd(p, bwd.front(), kGrad);
    ASSERT_EQ(made.size(), 1u);
    // (The embedding's own gradient, Temp until the root's post-backward files it, is the other
    // buffer of that size freed there.)
    const std::vector<int32_t> freed = tempAtEnd(p, bwd.back(), -kGrad);
    ASSERT_EQ(freed.size(), 2u);
    EXPECT_NE(std::find(freed.begin(), freed.end(), made[0]), freed.end());
    // The head's backward: dgrad and wgrad against the [256000, 3072] weight.
    EXPECT_EQ(countHeadGemms(p, bwd.front()), 2);

    // With AC full at 8 ranks the step's peak is the embedding's backward, holding three such
    // gradients as Temp, and the final norm's weight gradient (3,072 x 2 B, Temp until the root's
    // post-backward): 4,718,598,144 B, FSDPMemTracker's Temp at its peak to the byte
    // (docs/validation-memory.md, gemma-7b-2k-acfull).
    MemoryReport m;
    replayMemory(p, m);
    EXPECT_EQ(m.peak_task, bwd.back());
    EXPECT_EQ(m.at_peak[static_cast<size_t>(MemCategory::Temp)], 3 * kGrad + kHidden * 2);
    // Every block's backward in between runs with the held gradient alive.
    MemoryReport curve;
    replayMemory(p, curve, true);
    int blocks_seen = 0;
    for (const MemorySample& s : curve.curve) {
        if (s.task < 0) continue;  // the initial state
        const Task& t = p.tasks[static_cast<size_t>(s.task)];
        if (t.kind != TaskKind::Backward || t.unit == 0) continue;
        ++blocks_seen;
        EXPECT_GE(s.bytes[static_cast<size_t>(MemCategory::Temp)], kGrad) << "task " << s.task;
    }
    EXPECT_GT(blocks_seen, 0);
}

TEST(TiedHead, FrozenEmbeddingHoldsNothingAndSkipsTheWeightGradient) {
    // The tied weight frozen: the head computes the input gradient only (rule G1) and no
    // [vocab, hidden] gradient exists anywhere.
    const Program p = gemma7b("full", "embed_tokens");
    const std::vector<int32_t> bwd = rootBackwards(p);
    ASSERT_FALSE(bwd.empty());
    EXPECT_TRUE(tempAtEnd(p, bwd.front(), kGrad).empty());
    EXPECT_EQ(countHeadGemms(p, bwd.front()), 1);
    MemoryReport m;
    replayMemory(p, m);
    EXPECT_LT(m.max_per_category[static_cast<size_t>(MemCategory::Temp)], 3 * kGrad);
}

TEST(TiedHead, OtherFrozenParametersKeepTheTiedWeightGradient) {
    // Rule G1 with some parameter frozen: the tied head reads a trainable weight (the embedding's),
    // so its backward still makes the weight gradient, and holds it.
    const Program p = gemma7b("none", "layers\\.0\\.");
    const std::vector<int32_t> bwd = rootBackwards(p);
    ASSERT_EQ(bwd.size(), 2u);
    EXPECT_EQ(countHeadGemms(p, bwd.front()), 2);
    EXPECT_EQ(tempAtEnd(p, bwd.front(), kGrad).size(), 1u);
    EXPECT_EQ(tempAtEnd(p, bwd.back(), -kGrad).size(), 2u);
}
