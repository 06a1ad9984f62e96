// InProcessWorld: the meeting point of ranks that are threads of one process (run --gpus N).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "executor/in_process_world.hpp"

namespace shardcast::exec {
namespace {

constexpr int32_t kRanks = 4;

// Runs body(rank) on one thread per rank and joins them.
template <class F>
void onEveryRank(int32_t ranks, F body) {
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < ranks; ++r) threads.emplace_back([&body, r] { body(r); });
    for (std::thread& t : threads) t.join();
}

TEST(InProcessWorldTest, AllGatherGivesEveryRankEveryRanksBytes) {
    InProcessWorld world(kRanks);
    constexpr int kRounds = 200;  // back-to-back calls: a rank must never read a slot of the next round
    constexpr int kBytes = 8;
    std::array<std::atomic<int>, kRanks> mismatches{};
    onEveryRank(kRanks, [&](int32_t r) {
        Bootstrap& me = world.member(r);
        EXPECT_EQ(me.rank(), r);
        EXPECT_EQ(me.worldSize(), kRanks);
        for (int round = 0; round < kRounds; ++round) {
            std::array<unsigned char, kBytes> mine{};
            for (int i = 0; i < kBytes; ++i) mine[static_cast<size_t>(i)] = static_cast<unsigned char>(r * 31 + round * 7 + i);
            std::array<unsigned char, kRanks * kBytes> all{};
            ASSERT_TRUE(me.allGather(mine.data(), kBytes, all.data()));
            for (int from = 0; from < kRanks; ++from) {
                for (int i = 0; i < kBytes; ++i) {
                    const auto want = static_cast<unsigned char>(from * 31 + round * 7 + i);
                    if (all[static_cast<size_t>(from * kBytes + i)] != want) ++mismatches[static_cast<size_t>(r)];
                }
            }
        }
    });
    for (int32_t r = 0; r < kRanks; ++r) EXPECT_EQ(mismatches[static_cast<size_t>(r)].load(), 0) << "rank " << r;
}

TEST(InProcessWorldTest, AllGatherOfDifferentSizesFailsOnEveryRank) {
    InProcessWorld world(2);
    std::array<bool, 2> ok{true, true};
    std::array<std::string, 2> message;
    onEveryRank(2, [&](int32_t r) {
        const std::array<unsigned char, 8> mine{};
        std::array<unsigned char, 16> all{};
        auto s = world.member(r).allGather(mine.data(), r == 0 ? 4 : 8, all.data());
        ok[static_cast<size_t>(r)] = static_cast<bool>(s);
        if (!s) message[static_cast<size_t>(r)] = s.error().message;
    });
    EXPECT_FALSE(ok[0]);
    EXPECT_FALSE(ok[1]);
    EXPECT_NE(message[0].find("rank 1 gave 8 bytes where this rank gave 4"), std::string::npos) << message[0];
}

TEST(InProcessWorldTest, BarrierReleasesNoRankBeforeEveryRankArrived) {
    InProcessWorld world(kRanks);
    constexpr int kRounds = 100;
    std::array<std::atomic<int>, kRanks> arrived{};  // rounds each rank has entered
    std::atomic<int> early{0};
    onEveryRank(kRanks, [&](int32_t r) {
        for (int round = 1; round <= kRounds; ++round) {
            // The last rank dawdles, so a barrier that let ranks through early would be caught.
            if (r == kRanks - 1 && round % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            arrived[static_cast<size_t>(r)].store(round);
            ASSERT_TRUE(world.member(r).barrier());
            for (int32_t other = 0; other < kRanks; ++other) {
                if (arrived[static_cast<size_t>(other)].load() < round) ++early;
            }
        }
    });
    EXPECT_EQ(early.load(), 0);
}

TEST(InProcessWorldTest, AbortFromOneRankFailsTheOthersWaitingAndLaterCalls) {
    InProcessWorld world(kRanks);
    std::vector<std::future<std::string>> waiting;
    for (int32_t r = 1; r < kRanks; ++r) {
        waiting.push_back(std::async(std::launch::async, [&world, r] {
            auto s = world.member(r).barrier();  // rank 0 never arrives
            return s ? std::string("barrier returned OK") : s.error().message;
        }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(world.aborted());
    world.member(0).abort("task 7 failed");
    world.member(2).abort("a second abort");  // the first one's message stays
    EXPECT_TRUE(world.aborted());
    for (auto& f : waiting) {
        // A hang is the failure this test looks for; a generous bound only keeps ctest from waiting forever.
        ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "a rank still waits after the abort";
        const std::string m = f.get();
        EXPECT_NE(m.find("the run was aborted: rank 0: task 7 failed"), std::string::npos) << m;
    }
    std::array<unsigned char, 4> mine{}, all{};
    auto later = world.member(3).allGather(mine.data(), 1, all.data());
    ASSERT_FALSE(later);
    EXPECT_NE(later.error().message.find("rank 0: task 7 failed"), std::string::npos) << later.error().message;
    EXPECT_FALSE(world.member(0).barrier());
}

}  // namespace
}  // namespace shardcast::exec
