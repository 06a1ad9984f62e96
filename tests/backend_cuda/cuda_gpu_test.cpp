// Tests that need an NVIDIA GPU (ctest label `gpu`); each skips with a message when
// cudaGetDeviceCount reports none. GEMMs of the backend's cuBLASLt path against a CPU reference,
// an emulated rank of a 4-rank plan, a 1-rank plan on real NCCL and (with two GPUs) a 2-rank plan
// as threads (--gpus 2), each producing a full measured timeline whose counted memory is the
// prediction's, whose pool high-water mark covers the counted peak and whose GPU-event time lies
// within the host clock's; an allocation beyond the device reported as out of memory.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend_cuda/cuda_backend.hpp"
#include "backend_cuda/cuda_check.hpp"
#include "backend_cuda/gemm.hpp"
#include "backend_cuda/kernels.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "core/results/run_record.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cuda {
namespace {

bool haveGpu(std::string& why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        why = std::string("no usable CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(e);
        return false;
    }
    if (count == 0) {
        why = "cudaGetDeviceCount reports no CUDA device";
        return false;
    }
    return true;
}

#define REQUIRE_GPU()                          \
    do {                                       \
        std::string why_;                      \
        if (!haveGpu(why_)) GTEST_SKIP() << why_; \
    } while (0)

// Two CUDA devices or a skip naming what has fewer.
#define REQUIRE_TWO_GPUS()                                                                         \
    do {                                                                                           \
        REQUIRE_GPU();                                                                             \
        int count_ = 0;                                                                            \
        ASSERT_EQ(cudaGetDeviceCount(&count_), cudaSuccess);                                       \
        if (count_ < 2) GTEST_SKIP() << "this needs two CUDA devices; this machine has " << count_; \
    } while (0)

uint16_t toBf16(float v) {  // exact for the small integers used here
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    return static_cast<uint16_t>(bits >> 16);
}
float fromBf16(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float v = 0;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
}

// C = A B column-major with small integer entries: every product and sum (|C| <= k * 4 = 128) is
// exact in fp32 and in bf16, so the GPU must match the CPU exactly.
void checkGemm(core::DType dtype, int64_t m, int64_t n, int64_t k) {
    std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), want(static_cast<size_t>(m * n), 0.0f);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int64_t>(i * 7 % 5) - 2);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int64_t>(i * 3 % 5) - 2);
    for (int64_t col = 0; col < n; ++col) {
        for (int64_t row = 0; row < m; ++row) {
            float sum = 0;
            for (int64_t x = 0; x < k; ++x) sum += a[static_cast<size_t>(x * m + row)] * b[static_cast<size_t>(col * k + x)];
            want[static_cast<size_t>(col * m + row)] = sum;
        }
    }
    const bool half = dtype != core::DType::F32;
    const size_t item = half ? 2 : 4;
    auto upload = [&](const std::vector<float>& host) {
        void* dev = nullptr;
        EXPECT_EQ(cudaMalloc(&dev, host.size() * item), cudaSuccess);
        if (half) {
            std::vector<uint16_t> h(host.size());
            for (size_t i = 0; i < host.size(); ++i) h[i] = toBf16(host[i]);
            EXPECT_EQ(cudaMemcpy(dev, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
        } else {
            EXPECT_EQ(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        }
        return dev;
    };
    void* da = upload(a);
    void* db = upload(b);
    void* dc = upload(std::vector<float>(want.size(), -1.0f));
    GemmRunner gemm;
    auto init = gemm.init();
    ASSERT_TRUE(init.ok()) << init.error().message;
    auto ran = gemm.run(m, n, k, dtype, da, db, dc, nullptr);
    ASSERT_TRUE(ran.ok()) << ran.error().message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(want.size());
    if (half) {
        std::vector<uint16_t> h(want.size());
        ASSERT_EQ(cudaMemcpy(h.data(), dc, h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < h.size(); ++i) got[i] = fromBf16(h[i]);
    } else {
        ASSERT_EQ(cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << core::dtypeName(dtype) << " GEMM " << m << "x" << n << "x" << k << ": element " << i;
    }
}

TEST(CudaGpuTest, GemmMatchesCpuReference) {
    REQUIRE_GPU();
    checkGemm(core::DType::F32, 64, 48, 32);
    checkGemm(core::DType::BF16, 64, 48, 32);
    checkGemm(core::DType::BF16, 128, 256, 32);
}

// Runs `shardcast ARGS --out FILE` on tiny-llama and checks its record against the prediction of
// exactly what ran: a timeline of every task of the Program on its stream, exactly `emulated`
// collectives and P2P tasks marked emulated (all or none), and counted memory equal to the Program's events on
// the measured timeline and, for each category one stream touches, to the prediction's bytes.
void runAndCheck(const std::string& args, int32_t world, int32_t recorded_rank, bool emulated) {
    const auto out = std::filesystem::temp_directory_path() / "shardcast_cuda_gpu_run.json";
    const std::string cmd = std::string(SHARDCAST_BIN) + " run --backend cuda --model " + SHARDCAST_SOURCE_DIR +
                            "/models/tiny-llama.json --seq-len 64 --micro-batch 1 --warmup 1 --steps 2 " + args +
                            " --out " + out.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto record = core::loadRunRecord(out);
    std::filesystem::remove(out);
    ASSERT_TRUE(record.ok()) << record.error().message;
    EXPECT_EQ(record->backend, "cuda");
    EXPECT_EQ(record->world_size, world);
    EXPECT_EQ(record->recorded_rank, recorded_rank);
    EXPECT_EQ(record->step_ns.size(), 2u);
    EXPECT_TRUE(record->environment.contains("gpu"));
    auto plan = core::planFromJson(record->plan, "record plan", SHARDCAST_SOURCE_DIR);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    auto profile = sim::profileFromJson(record->profile, "record profile", sim::HardwareProfile::fromCluster(plan->cluster));
    ASSERT_TRUE(profile.ok()) << profile.error().message;
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    // The recorded rank's stage under pipeline parallelism (as compare predicts it).
    options.pipeline_stage = recorded_rank / std::max(1, world / std::max(1, plan->sharding.pp));
    auto predicted = sim::evaluatePlan(*plan, &*profile, options);
    ASSERT_TRUE(predicted.ok()) << predicted.error().message;
    const core::Program& program = predicted->program;
    ASSERT_EQ(record->timeline.tasks.size(), program.tasks.size());
    std::vector<int32_t> collectives;
    for (size_t i = 0; i < program.tasks.size(); ++i) {
        const core::TaskTime& t = record->timeline.tasks[i];
        EXPECT_LE(0, t.start_ns);
        EXPECT_LE(t.start_ns, t.end_ns) << "task " << i;
        EXPECT_EQ(t.stream, program.tasks[i].stream) << "task " << i;
        // What an emulated rank fills locally: collectives and pipeline receives (and its sends).
        if (core::isCollective(program.tasks[i].kind) || core::isP2P(program.tasks[i].kind)) {
            collectives.push_back(static_cast<int32_t>(i));
        }
    }
    EXPECT_FALSE(collectives.empty());
    EXPECT_EQ(record->emulated_tasks, emulated ? collectives : std::vector<int32_t>{});
    // Memory: the Program's events on the measured timeline (what the executor counted), and, for
    // each category only one stream touches (its high-water mark does not depend on timing), the
    // prediction's bytes exactly (as tests/backend_cpu/run_record_check.cpp does).
    core::TimedMemory replayed;
    core::MemoryTimer timer;
    timer.compute(program, record->timeline, replayed);
    EXPECT_EQ(record->memory.max_per_category, replayed.max_per_category);
    std::array<uint32_t, core::kMemCategoryCount> streams{};
    for (const core::Task& task : program.tasks) {
        for (core::Span span : {task.mem_start, task.mem_peak, task.mem_end}) {
            for (uint32_t k = 0; k < span.count; ++k) {
                const core::MemEvent& e = program.mem[span.offset + k];
                const core::Stream by = e.timed_after >= 0 ? program.tasks[static_cast<size_t>(e.timed_after)].stream : task.stream;
                streams[static_cast<size_t>(e.category)] |= 1u << static_cast<unsigned>(by);
            }
        }
    }
    for (size_t c = 0; c < streams.size(); ++c) {
        if ((streams[c] & (streams[c] - 1)) != 0) continue;
        EXPECT_EQ(record->memory.max_per_category[c], predicted->timed.max_per_category[c])
            << core::categoryName(static_cast<core::MemCategory>(c));
    }
    // The device's cross-check: the counted buffers' pool held at least every counted byte at the
    // counted peak (its high-water mark adds the allocator's cache of freed blocks).
    const nlohmann::json& device = record->environment.at("device_memory");
    EXPECT_GE(device.at("pool_used_high_bytes").get<int64_t>(), record->memory.peak_bytes) << device.dump();
    EXPECT_GE(device.at("pool_reserved_high_bytes").get<int64_t>(), device.at("pool_used_high_bytes").get<int64_t>());
    // GPU time by events lies inside the host clock's bracket of each task (recorded after the
    // host's start stamp, completed before its end stamp), up to the events' ~0.5 us resolution.
    const nlohmann::json& compute =
        record->environment.at("stream_busy_median_step").at("streams").at(std::string(core::streamName(core::Stream::Compute)));
    const auto by_events = compute.at("cuda_events_ns").get<int64_t>();
    EXPECT_GT(by_events, 0) << compute.dump();
    EXPECT_LE(by_events, compute.at("host_clock_ns").get<int64_t>() + 1000 * static_cast<int64_t>(program.tasks.size()))
        << compute.dump();
}

// `--emulate-rank 1` of a 4-rank plan on one GPU: collectives filled locally, all marked emulated.
TEST(CudaGpuTest, EmulatedRankProducesAFullTimeline) {
    REQUIRE_GPU();
    runAndCheck("--nodes 1 --gpus-per-node 4 --strategy FULL_SHARD --emulate-rank 1", 4, 1, true);
}

// A 1-rank plan without mpirun: real NCCL communicators of one rank (ncclGetUniqueId,
// ncclCommInitRank, the collectives), nothing emulated.
TEST(CudaGpuTest, OneRankRunUsesNccl) {
    REQUIRE_GPU();
    runAndCheck("--nodes 1 --gpus-per-node 1 --strategy FULL_SHARD", 1, 0, false);
}

// Two GPUs as two threads of one process (--gpus 2): NCCL between the threads, rank 0 recorded.
TEST(CudaGpuTest, TwoGpusAsThreadsOfOneProcess) {
    REQUIRE_TWO_GPUS();
    runAndCheck("--nodes 1 --gpus-per-node 2 --strategy FULL_SHARD --gpus 2", 2, 0, false);
}

// Pipeline stages: `--emulate-rank 2` of a 4-rank plan with 2 stages runs stage 1's Program alone,
// its collectives and its P2P receives filled locally; the record is predicted on stage 1.
TEST(CudaGpuTest, EmulatedPipelineRankRunsItsStage) {
    REQUIRE_GPU();
    runAndCheck("--nodes 1 --gpus-per-node 4 --strategy FULL_SHARD --pp 2 --grad-accum 2 --emulate-rank 2", 4, 2, true);
}

// Two pipeline stages on two GPUs as threads (--gpus 2 --pp 2): ncclSend / ncclRecv between them
// on links of their own, every received byte verified (--verify), Interleaved1F1B's wrap-around
// included.
TEST(CudaGpuTest, PipelineStagesOnTwoGpusSendAndReceiveWithNccl) {
    REQUIRE_TWO_GPUS();
    runAndCheck("--nodes 1 --gpus-per-node 2 --strategy FULL_SHARD --pp 2 --grad-accum 4 --gpus 2 --verify", 2, 0, false);
    runAndCheck("--nodes 1 --gpus-per-node 2 --strategy FULL_SHARD --pp 2 --grad-accum 4 --pp-schedule Interleaved1F1B "
                "--pp-virtual-stages 2 --gpus 2 --verify",
                2, 0, false);
}

// An allocation the device cannot hold: std::bad_alloc naming the bytes, the plan's predicted
// peak and cudaMemGetInfo, and the backend still allocates afterwards.
// calibrate's GEMM operands: every bf16 half finite, 2^-7 <= |x| < 2, both signs, thousands of
// distinct values; every 32-bit word a finite fp32; the same seed the same bytes, another seed others.
TEST(CudaGpuTest, RandomFillGivesFiniteVariedOperands) {
    REQUIRE_GPU();
    constexpr int64_t kBytes = int64_t{1} << 20;
    void* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, kBytes), cudaSuccess);
    auto fetch = [&](uint64_t seed) {
        std::vector<uint16_t> h(kBytes / 2);
        EXPECT_EQ(launchFillRandom(d, kBytes, seed, nullptr), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    };
    const std::vector<uint16_t> a = fetch(7), again = fetch(7), other = fetch(8);
    cudaFree(d);
    EXPECT_EQ(a, again);
    EXPECT_NE(a, other);
    std::set<uint16_t> distinct;
    int64_t negative = 0;
    for (const uint16_t h : a) {
        const float v = fromBf16(h);
        ASSERT_TRUE(std::isfinite(v));
        ASSERT_GE(std::fabs(v), 1.0f / 128);
        ASSERT_LT(std::fabs(v), 2.0f);
        negative += v < 0;
        distinct.insert(h);
    }
    for (size_t i = 0; i + 1 < a.size(); i += 2) {
        const uint32_t bits = (static_cast<uint32_t>(a[i + 1]) << 16) | a[i];
        float f = 0;
        std::memcpy(&f, &bits, sizeof(f));
        ASSERT_TRUE(std::isfinite(f));
    }
    EXPECT_GT(distinct.size(), 1500u);  // 2 signs x 8 exponents x 128 mantissas = 2048 possible
    EXPECT_GT(negative, static_cast<int64_t>(a.size()) / 3);
    EXPECT_LT(negative, static_cast<int64_t>(a.size()) * 2 / 3);
}

TEST(CudaGpuTest, AllocationBeyondTheDeviceIsOutOfMemoryNamingTheBytes) {
    REQUIRE_GPU();
    CudaBackendOptions options;
    options.emulate_rank = 0;
    options.world_size = 1;
    options.predicted_peak_bytes = 12345;
    auto backend = CudaBackend::create(options, nullptr);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    const int64_t huge = int64_t{1} << 50;  // 1 PiB
    std::string message;
    try {
        (*backend)->allocate(huge);
    } catch (const std::bad_alloc& e) {
        message = e.what();
    }
    EXPECT_NE(message.find("out of device memory"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(huge) + " bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("predicted peak of counted allocations is 12345 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("cudaMemGetInfo: "), std::string::npos) << message;
    void* small = (*backend)->allocate(int64_t{1} << 20);
    EXPECT_NE(small, nullptr);
    (*backend)->release(small, int64_t{1} << 20);
}

// --verify on a 1-rank plan: every collective's data checked (one-rank averages are the data
// itself), and the report says how many.
TEST(CudaGpuTest, VerifyChecksEveryCollectiveOfAOneRankRun) {
    REQUIRE_GPU();
    const auto log = std::filesystem::temp_directory_path() / "shardcast_cuda_verify.txt";
    const std::string cmd = std::string(SHARDCAST_BIN) + " run --backend cuda --model " + SHARDCAST_SOURCE_DIR +
                            "/models/tiny-llama.json --seq-len 64 --micro-batch 1 --nodes 1 --gpus-per-node 1 --warmup 0 "
                            "--steps 1 --verify > " + log.string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::filesystem::remove(log);
    ASSERT_EQ(status, 0) << text;
    EXPECT_NE(text.find("Verify              OK: "), std::string::npos) << text;
    EXPECT_EQ(text.find("OK: 0 collectives"), std::string::npos) << text;
}

}  // namespace
}  // namespace shardcast::cuda
