// Process groups of a lowered Program: which group each collective names, and the member ranks
// of every group for any rank of the mesh, worked out by hand for rank = r * W + s.
#include <gtest/gtest.h>

#include <memory>

#include "core/lower/lower.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

using namespace shardcast::core;

namespace {

Program lowered(Strategy strategy, int nodes, int gpus_per_node, int reshard_k = 0) {
    auto model = resolveModel("pythia-160m");
    EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
    Plan plan;
    plan.model = std::make_shared<const Model>(std::move(*model));
    plan.model_ref = "pythia-160m";
    plan.cluster.gpu = *findGpuPreset("H100-SXM");
    plan.cluster.nodes = nodes;
    plan.cluster.gpus_per_node = gpus_per_node;
    plan.training.seq_len = 512;
    plan.sharding.strategy = strategy;
    if (reshard_k > 0) {
        plan.sharding.reshard_after_forward = ReshardMode::Count;
        plan.sharding.reshard_after_forward_k = reshard_k;
    }
    auto mesh = validatePlan(plan);
    EXPECT_TRUE(mesh.ok()) << (mesh.ok() ? "" : mesh.error().message);
    Program p;
    auto st = lower(plan, *mesh, p);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    return p;
}

int32_t groupOf(const Program& p, GroupKind kind) {
    for (size_t g = 0; g < p.groups.size(); ++g)
        if (p.groups[g].kind == kind) return static_cast<int32_t>(g);
    return -1;
}

using Ranks = std::vector<int32_t>;

}  // namespace

// HYBRID_SHARD on 2 nodes x 8: W = 8, R = 2. Rank 11 = 1 * 8 + 3: its shard group is node 1
// (8..15), its replicate group the ranks at position 3 of each shard group (3 and 11).
TEST(ProcessGroupTest, HybridShardGroupsOfRankEleven) {
    const Program p = lowered(Strategy::HybridShard, 2, 8, 2);
    EXPECT_EQ(p.world_size, 16);
    const int32_t world = groupOf(p, GroupKind::World), shard = groupOf(p, GroupKind::Shard),
                  replicate = groupOf(p, GroupKind::Replicate), post = groupOf(p, GroupKind::PostForward);
    ASSERT_GE(world, 0);
    ASSERT_GE(shard, 0);
    ASSERT_GE(replicate, 0);
    ASSERT_GE(post, 0);
    EXPECT_EQ(groupRanks(p, shard, 11), (Ranks{8, 9, 10, 11, 12, 13, 14, 15}));
    EXPECT_EQ(groupRanks(p, replicate, 11), (Ranks{3, 11}));
    // reshard_after_forward=2: pairs of consecutive ranks inside the shard group.
    EXPECT_EQ(groupRanks(p, post, 11), (Ranks{10, 11}));
    EXPECT_EQ(groupRanks(p, post, 0), (Ranks{0, 1}));
    EXPECT_EQ(groupRanks(p, world, 11).size(), 16u);
    EXPECT_EQ(groupRanks(p, shard, 0), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(groupRanks(p, replicate, 0), (Ranks{0, 8}));
    // Sizes and the nodes spanned: a shard group inside a node, the replicas on two nodes.
    EXPECT_EQ(p.groups[static_cast<size_t>(shard)].size, 8);
    EXPECT_EQ(p.groups[static_cast<size_t>(shard)].nodes, 1);
    EXPECT_EQ(p.groups[static_cast<size_t>(replicate)].size, 2);
    EXPECT_EQ(p.groups[static_cast<size_t>(replicate)].nodes, 2);
    EXPECT_EQ(p.groups[static_cast<size_t>(world)].nodes, 2);
    // Out of range: no ranks.
    EXPECT_TRUE(groupRanks(p, shard, 16).empty());
    EXPECT_TRUE(groupRanks(p, static_cast<int32_t>(p.groups.size()), 0).empty());
}

// Every collective names its group: all-gathers and reduce-scatters the shard group (the
// backward re-gather of a 1/k slice the post-forward group), all-reduces the replicate group;
// the task's size and nodes are the group's. Reductions run in reduce_dtype (fp32), gathers in
// param_dtype (bf16).
TEST(ProcessGroupTest, CollectivesNameTheirGroups) {
    const Program p = lowered(Strategy::HybridShard, 2, 8, 2);
    int post_forward_gathers = 0;
    for (const Task& t : p.tasks) {
        if (!isCollective(t.kind)) {
            EXPECT_EQ(t.group, -1);
            continue;
        }
        ASSERT_GE(t.group, 0);
        const ProcessGroup& g = p.groups[static_cast<size_t>(t.group)];
        EXPECT_EQ(t.group_size, g.size);
        EXPECT_EQ(t.group_nodes, g.nodes);
        switch (t.kind) {
            case TaskKind::AllGather:
                EXPECT_TRUE(g.kind == GroupKind::Shard || g.kind == GroupKind::PostForward);
                post_forward_gathers += g.kind == GroupKind::PostForward;
                EXPECT_EQ(t.dtype, DType::BF16);
                break;
            case TaskKind::ReduceScatter:
                EXPECT_EQ(g.kind, GroupKind::Shard);
                EXPECT_EQ(t.dtype, DType::F32);
                break;
            default:
                EXPECT_EQ(g.kind, GroupKind::Replicate);
                EXPECT_EQ(t.dtype, DType::F32);
                break;
        }
    }
    // Every resharded block (12 of pythia-160m, not the root) is re-gathered from its slice.
    EXPECT_EQ(post_forward_gathers, 12);
}

// NO_SHARD all-reduces over the world group: world 8 on one node.
TEST(ProcessGroupTest, NoShardAllReducesOverTheWorld) {
    const Program p = lowered(Strategy::NoShard, 1, 8);
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups[0].kind, GroupKind::World);
    int all_reduces = 0;
    for (const Task& t : p.tasks) {
        if (t.kind != TaskKind::AllReduce) continue;
        ++all_reduces;
        EXPECT_EQ(t.group, 0);
        EXPECT_EQ(t.group_size, 8);
    }
    EXPECT_GT(all_reduces, 0);
    EXPECT_EQ(groupRanks(p, 0, 5), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
}

// A hand-made table: W = 2 on nodes of 4 GPUs, world 8, R = 4. Rank 5 = 2 * 2 + 1: shard group
// {4, 5}; replicate group {1, 3, 5, 7}, which spans both nodes.
TEST(ProcessGroupTest, SmallShardGroupsInsideANode) {
    Program p;
    p.world_size = 8;
    p.groups = {ProcessGroup{GroupKind::Shard, 2, 1, 1}, ProcessGroup{GroupKind::Replicate, 4, 2, 2}};
    EXPECT_EQ(groupRanks(p, 0, 5), (Ranks{4, 5}));
    EXPECT_EQ(groupRanks(p, 1, 5), (Ranks{1, 3, 5, 7}));
    EXPECT_EQ(groupRanks(p, 1, 6), (Ranks{0, 2, 4, 6}));
}
