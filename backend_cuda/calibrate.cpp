#include "backend_cuda/calibrate.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <nlohmann/json.hpp>

#include "backend_cuda/cuda_check.hpp"
#include "backend_cuda/gemm.hpp"
#include "backend_cuda/kernels.hpp"
#include "core/base/host_info.hpp"
#include "core/plan/cluster.hpp"
#include "core/plan/plan_build.hpp"

namespace shardcast::cuda {
namespace {

using core::TaskKind;

// A failed CUDA / cuBLASLt / NCCL call mid-measurement unwinds (RAII frees the device state) to
// calibrateCuda, which returns it as the error.
void check(core::Status s) {
    if (!s) throw std::runtime_error(s.error().message);
}

constexpr std::array<TaskKind, 3> kKinds = {TaskKind::AllGather, TaskKind::ReduceScatter, TaskKind::AllReduce};

const char* collectiveName(TaskKind kind) {
    switch (kind) {
        case TaskKind::AllGather: return "all-gather";
        case TaskKind::ReduceScatter: return "reduce-scatter";
        default: return "all-reduce";
    }
}

struct Sizes {
    std::vector<int64_t> square;          // m = n = k, in bf16 and fp32
    std::vector<int64_t> traffic_bytes;   // HBM: bytes read + written per kernel
    std::vector<int64_t> collective_bytes;
    int repeats;                          // timed samples per point
    int collective_iterations, collective_warmup;
    int64_t overlap_gemm, overlap_bytes;
};

Sizes makeSizes(bool quick) {
    Sizes s;
    s.square = quick ? std::vector<int64_t>{256, 1024, 4096} : std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192};
    s.traffic_bytes = quick ? std::vector<int64_t>{int64_t{256} << 20, int64_t{1} << 30}
                            : std::vector<int64_t>{int64_t{64} << 20, int64_t{256} << 20, int64_t{1} << 30, int64_t{4} << 30};
    s.collective_bytes = collectiveSizes(quick);
    s.repeats = quick ? 3 : 7;
    // nccl-tests' defaults: 20 timed iterations after 5 warmup ones (-n 20 -w 5, README.md).
    s.collective_iterations = quick ? 5 : 20;
    s.collective_warmup = quick ? 2 : 5;
    s.overlap_gemm = 4096;
    s.overlap_bytes = quick ? int64_t{16} << 20 : int64_t{64} << 20;
    return s;
}

// Device memory freed on scope exit (cudaFree on the device that allocated it).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(int device, int64_t bytes) : m_device(device), m_bytes(bytes) {
        check(cudaCheck(cudaSetDevice(device), "cudaSetDevice"));
        check(cudaCheck(cudaMalloc(&m_ptr, static_cast<size_t>(bytes)), fmt::format("cudaMalloc of {} bytes", bytes)));
        // Random operands, as training's are: on an H200 a bf16 GEMM of constant operands measured
        // 912.6 TFLOP/s here, against PyTorch's 801 on random data (14% faster; gpu-check,
        // 2026-12-04). Filled on the legacy default stream, which the non-blocking streams below
        // do not wait for: synchronized before any of them reads it.
        static std::atomic<uint64_t> buffers{0};
        check(cudaCheck(launchFillRandom(m_ptr, bytes, ++buffers, nullptr), "launchFillRandom"));
        check(cudaCheck(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (fill)"));
    }
    ~DeviceBuffer() {
        if (m_ptr == nullptr) return;
        cudaSetDevice(m_device);
        cudaFree(m_ptr);
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : m_device(o.m_device), m_bytes(o.m_bytes), m_ptr(std::exchange(o.m_ptr, nullptr)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(m_device, o.m_device);
        std::swap(m_bytes, o.m_bytes);
        std::swap(m_ptr, o.m_ptr);
        return *this;
    }
    void* get() const { return m_ptr; }
    int64_t bytes() const { return m_bytes; }

private:
    int m_device = 0;
    int64_t m_bytes = 0;
    void* m_ptr = nullptr;
};

class Event {
public:
    Event() { check(cudaCheck(cudaEventCreate(&m_event), "cudaEventCreate")); }
    ~Event() { cudaEventDestroy(m_event); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    void record(cudaStream_t stream) { check(cudaCheck(cudaEventRecord(m_event, stream), "cudaEventRecord")); }
    // Seconds from `start` to this event, once this one has completed.
    double secondsSince(const Event& start) {
        check(cudaCheck(cudaEventSynchronize(m_event), "cudaEventSynchronize"));
        float ms = 0;
        check(cudaCheck(cudaEventElapsedTime(&ms, start.m_event, m_event), "cudaEventElapsedTime"));
        return static_cast<double>(ms) * 1e-3;
    }

private:
    cudaEvent_t m_event = nullptr;
};

// One GPU's streams (FSDP2's priorities as in the backend: the communication stream high) and
// its GEMM runner.
struct Device {
    int id = 0;
    cudaStream_t compute = nullptr;
    cudaStream_t comm = nullptr;
    std::unique_ptr<GemmRunner> gemm;
    explicit Device(int device) : id(device) {
        check(cudaCheck(cudaSetDevice(device), "cudaSetDevice"));
        int least = 0, greatest = 0;
        check(cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"));
        check(cudaCheck(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, least), "cudaStreamCreateWithPriority"));
        check(cudaCheck(cudaStreamCreateWithPriority(&comm, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority"));
        gemm = std::make_unique<GemmRunner>();
        check(gemm->init());
    }
    ~Device() {
        cudaSetDevice(id);
        cudaDeviceSynchronize();
        gemm.reset();
        cudaStreamDestroy(compute);
        cudaStreamDestroy(comm);
    }
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;
};

// Times `enqueue` (one unit of work on `stream`) by events: a batch long enough to hide the
// events' resolution (about 0.5 us, cudaEventElapsedTime), `repeats` batches, the typical one.
template <class F>
double timeOnStream(cudaStream_t stream, int repeats, F enqueue) {
    Event start, end;
    enqueue();  // warmup: cuBLASLt's heuristic, clocks ramping up
    start.record(stream);
    enqueue();
    end.record(stream);
    const double first = end.secondsSince(start);
    const int batch = std::clamp(static_cast<int>(2e-3 / std::max(first, 1e-7)), 1, 200);
    std::vector<double> samples;
    for (int r = 0; r < repeats; ++r) {
        start.record(stream);
        for (int i = 0; i < batch; ++i) enqueue();
        end.record(stream);
        samples.push_back(end.secondsSince(start) / batch);
    }
    return sim::typicalSeconds(std::move(samples));
}

// Operands for every GEMM of the calibration: A, B and C of the largest product.
struct GemmOperands {
    DeviceBuffer a, b, c;
};

double gemmSeconds(Device& d, GemmOperands& o, int64_t m, int64_t n, int64_t k, core::DType dtype, int repeats) {
    return timeOnStream(d.compute, repeats, [&] {
        check(d.gemm->run(m, n, k, dtype, o.a.get(), o.b.get(), o.c.get(), d.compute));
    });
}

// The backend's attention per sequence and head (cuda_backend.cpp): scores = Q K^T, out = P V.
double attentionSeconds(Device& d, GemmOperands& o, int64_t seq, int64_t head_dim, int repeats) {
    return timeOnStream(d.compute, repeats, [&] {
        check(d.gemm->run(seq, seq, head_dim, core::DType::BF16, o.a.get(), o.b.get(), o.c.get(), d.compute));
        check(d.gemm->run(seq, head_dim, seq, core::DType::BF16, o.c.get(), o.a.get(), o.b.get(), d.compute));
    });
}

// nccl-tests' size S: the gathered buffer for all-gather and reduce-scatter, the buffer for
// all-reduce (doc/PERFORMANCE.md), rounded down to whole bf16 elements per rank.
int64_t roundedSize(int64_t bytes, int n) {
    const int64_t unit = int64_t{2} * n;
    return std::max<int64_t>(bytes / unit, 1) * unit;
}

// The local GPUs as one NCCL clique (ncclCommInitAll: "single process version"), with bf16
// buffers of the largest size on each.
class Clique {
public:
    Clique(std::vector<std::unique_ptr<Device>>& devices, int64_t max_bytes) : m_devices(devices) {
        const int n = static_cast<int>(devices.size());
        std::vector<int> ids(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = devices[static_cast<size_t>(i)]->id;
        m_comms.assign(static_cast<size_t>(n), nullptr);
        check(ncclCheck(ncclCommInitAll(m_comms.data(), n, ids.data()), "ncclCommInitAll"));
        for (int i = 0; i < n; ++i) {
            m_send.emplace_back(ids[static_cast<size_t>(i)], max_bytes);
            m_recv.emplace_back(ids[static_cast<size_t>(i)], max_bytes);
        }
    }
    ~Clique() {
        for (ncclComm_t c : m_comms) {
            if (c != nullptr) ncclCommDestroy(c);
        }
    }
    Clique(const Clique&) = delete;
    Clique& operator=(const Clique&) = delete;

    int size() const { return static_cast<int>(m_comms.size()); }

    // One collective of S bytes on every GPU's communication stream, in one NCCL group; reductions
    // with ncclAvg, as the backend issues them.
    void issue(TaskKind kind, int64_t bytes) {
        const int n = size();
        const auto count = static_cast<size_t>(kind == TaskKind::AllReduce ? bytes / 2 : bytes / (2 * n));
        check(ncclCheck(ncclGroupStart(), "ncclGroupStart"));
        for (int i = 0; i < n; ++i) {
            const auto u = static_cast<size_t>(i);
            void* send = m_send[u].get();
            void* recv = m_recv[u].get();
            cudaStream_t stream = m_devices[u]->comm;
            ncclResult_t r = ncclSuccess;
            switch (kind) {
                case TaskKind::AllGather: r = ncclAllGather(send, recv, count, ncclBfloat16, m_comms[u], stream); break;
                case TaskKind::ReduceScatter:
                    r = ncclReduceScatter(send, recv, count, ncclBfloat16, ncclAvg, m_comms[u], stream);
                    break;
                default: r = ncclAllReduce(send, recv, count, ncclBfloat16, ncclAvg, m_comms[u], stream); break;
            }
            if (r != ncclSuccess) {
                ncclGroupEnd();
                check(ncclCheck(r, collectiveName(kind)));
            }
        }
        check(ncclCheck(ncclGroupEnd(), "ncclGroupEnd"));
    }

    void synchronize() {
        for (auto& d : m_devices) {
            check(cudaCheck(cudaSetDevice(d->id), "cudaSetDevice"));
            check(cudaCheck(cudaStreamSynchronize(d->comm), "cudaStreamSynchronize"));
        }
    }

    // nccl-tests' time: `iterations` back to back after `warmup`, by the host clock from the first
    // issue to every stream synchronized, divided by the iterations (common.cu, BenchTime).
    double seconds(TaskKind kind, int64_t bytes, int iterations, int warmup) {
        for (int i = 0; i < warmup; ++i) issue(kind, bytes);
        synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) issue(kind, bytes);
        synchronize();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - t0;
        return elapsed.count() / iterations;
    }

private:
    std::vector<std::unique_ptr<Device>>& m_devices;
    std::vector<ncclComm_t> m_comms;
    std::vector<DeviceBuffer> m_send, m_recv;
};

// GEMMs on GPU 0's compute stream while all-gathers run on every GPU's communication stream,
// each loop sized to last about as long as the other; device 0's events time both.
OverlapPoint measureOverlap(Device& d0, GemmOperands& o, Clique& clique, const Sizes& sizes) {
    OverlapPoint p;
    p.gemm_size = sizes.overlap_gemm;
    p.all_gather_bytes = roundedSize(sizes.overlap_bytes, clique.size());
    const int64_t g = p.gemm_size;
    auto gemm = [&] { check(d0.gemm->run(g, g, g, core::DType::BF16, o.a.get(), o.b.get(), o.c.get(), d0.compute)); };
    check(cudaCheck(cudaSetDevice(d0.id), "cudaSetDevice"));
    p.gemm_alone_s = timeOnStream(d0.compute, sizes.repeats, gemm);
    constexpr int kAllGathers = 20;
    Event a0, a1, c0, c1;
    for (int i = 0; i < 2; ++i) clique.issue(TaskKind::AllGather, p.all_gather_bytes);  // warmup
    clique.synchronize();
    check(cudaCheck(cudaSetDevice(d0.id), "cudaSetDevice"));
    a0.record(d0.comm);
    for (int i = 0; i < kAllGathers; ++i) clique.issue(TaskKind::AllGather, p.all_gather_bytes);
    a1.record(d0.comm);
    p.all_gather_alone_s = a1.secondsSince(a0) / kAllGathers;
    clique.synchronize();
    const int gemms = std::clamp(static_cast<int>(std::lround(kAllGathers * p.all_gather_alone_s / p.gemm_alone_s)), 1, 10000);
    check(cudaCheck(cudaSetDevice(d0.id), "cudaSetDevice"));
    a0.record(d0.comm);
    c0.record(d0.compute);
    for (int i = 0; i < kAllGathers; ++i) clique.issue(TaskKind::AllGather, p.all_gather_bytes);
    check(cudaCheck(cudaSetDevice(d0.id), "cudaSetDevice"));
    for (int i = 0; i < gemms; ++i) gemm();
    a1.record(d0.comm);
    c1.record(d0.compute);
    p.all_gather_overlapped_s = a1.secondsSince(a0) / kAllGathers;
    p.gemm_overlapped_s = c1.secondsSince(c0) / gemms;
    clique.synchronize();
    return p;
}

// The preset whose name matches the device's (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"):
// every '-' separated part of the preset's name in the device's, else its first part alone.
std::optional<core::GpuSpec> presetFor(const std::string& device_name) {
    auto contains = [&](std::string_view part) {
        auto upper = [](std::string_view v) {
            std::string s(v);
            for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            return s;
        };
        return upper(device_name).find(upper(part)) != std::string::npos;
    };
    const core::GpuSpec* first_part = nullptr;
    for (const core::GpuSpec& g : core::gpuPresets()) {
        bool all = true;
        std::string_view rest = g.name;
        while (!rest.empty()) {
            const size_t dash = rest.find('-');
            all = all && contains(rest.substr(0, dash));
            rest = dash == std::string_view::npos ? std::string_view() : rest.substr(dash + 1);
        }
        if (all) return g;
        if (first_part == nullptr && contains(std::string_view(g.name).substr(0, g.name.find('-')))) first_part = &g;
    }
    if (first_part != nullptr) return *first_part;
    return std::nullopt;
}

std::string profileName(const std::string& device_name) {
    std::string name = "cuda-" + device_name;
    for (char& c : name) {
        if (c == ' ' || c == '/') c = '-';
    }
    return name;
}

core::Result<CudaCalibrationResult> measureAndFit(const CudaCalibrationOptions& options) {
    const Sizes sizes = makeSizes(options.quick);
    const int n = std::max(options.gpus, 1);
    CudaCalibrationResult r;
    CudaCalibrationMeasurements& m = r.measured;
    m.gpus = n;
    cudaDeviceProp prop{};
    check(cudaCheck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
    m.gpu_name = prop.name;
    std::vector<std::unique_ptr<Device>> devices;
    for (int i = 0; i < n; ++i) devices.push_back(std::make_unique<Device>(i));
    Device& d0 = *devices.front();

    // Operands: the largest A, B and C any GEMM or attention product below needs, in fp32 bytes.
    int64_t largest = 0;
    for (int64_t s : sizes.square) largest = std::max(largest, s * s * 4);
    for (const sim::GemmPoint& g : options.plan_gemms) largest = std::max({largest, g.m * g.k * 2, g.k * g.n * 2, g.m * g.n * 2});
    for (const AttentionPoint& a : options.plan_attention) largest = std::max({largest, a.seq * a.seq * 2, a.seq * a.head_dim * 2});
    GemmOperands operands{DeviceBuffer(0, largest), DeviceBuffer(0, largest), DeviceBuffer(0, largest)};

    const int total = static_cast<int>(2 * sizes.square.size() + options.plan_gemms.size() + options.plan_attention.size() +
                                       2 * sizes.traffic_bytes.size() +
                                       (n > 1 ? kKinds.size() * sizes.collective_bytes.size() + 1 : 0));
    int done = 0;
    auto step = [&](const std::string& what) {
        if (options.progress) options.progress(++done, total, what);
    };
    check(cudaCheck(cudaSetDevice(0), "cudaSetDevice"));
    for (core::DType dtype : {core::DType::BF16, core::DType::F32}) {
        for (int64_t s : sizes.square) {
            sim::GemmPoint p{s, s, s, false, gemmSeconds(d0, operands, s, s, s, dtype, sizes.repeats)};
            m.gemm.push_back({p, dtype, false});
            step(fmt::format("GEMM {0}x{0}x{0} {1}", s, core::dtypeName(dtype)));
        }
    }
    for (sim::GemmPoint p : options.plan_gemms) {
        p.seconds = gemmSeconds(d0, operands, p.m, p.n, p.k, core::DType::BF16, sizes.repeats);
        m.gemm.push_back({p, core::DType::BF16, true});
        step(fmt::format("GEMM {}x{}x{} bf16 (plan)", p.m, p.n, p.k));
    }
    for (AttentionPoint a : options.plan_attention) {
        a.seconds = attentionSeconds(d0, operands, a.seq, a.head_dim, sizes.repeats);
        m.attention.push_back(a);
        step(fmt::format("attention s={} d={}", a.seq, a.head_dim));
    }
    for (int64_t traffic : sizes.traffic_bytes) {
        DeviceBuffer src(0, traffic / 2), dst(0, traffic / 2);
        check(cudaCheck(cudaSetDevice(0), "cudaSetDevice"));
        const double kernel_s = timeOnStream(d0.compute, sizes.repeats, [&] {
            check(cudaCheck(launchTraffic(src.get(), dst.get(), traffic, d0.compute), "launchTraffic"));
        });
        m.memory.push_back({"traffic kernel", traffic, kernel_s});
        step(fmt::format("traffic kernel {} MiB", traffic >> 20));
        const double copy_s = timeOnStream(d0.compute, sizes.repeats, [&] {
            check(cudaCheck(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(traffic / 2), cudaMemcpyDeviceToDevice,
                                            d0.compute),
                            "cudaMemcpyAsync (device to device)"));
        });
        m.memory.push_back({"cudaMemcpyAsync D2D", traffic, copy_s});
        step(fmt::format("cudaMemcpyAsync D2D {} MiB", traffic >> 20));
    }
    if (n > 1) {
        Clique clique(devices, roundedSize(sizes.collective_bytes.back(), n));
        for (TaskKind kind : kKinds) {
            for (int64_t bytes : sizes.collective_bytes) {
                const int64_t s = roundedSize(bytes, n);
                m.collectives.push_back(
                    {kind, n, s, clique.seconds(kind, s, sizes.collective_iterations, sizes.collective_warmup)});
                step(fmt::format("{} {} B, {} GPUs", collectiveName(kind), s, n));
            }
        }
        m.overlap = measureOverlap(d0, operands, clique, sizes);
        step("GEMM under all-gather");
    }

    // Fits: the bf16 GEMMs (the plans' default dtype) give the efficiency curve; fp32's own fit
    // gives its peak on that curve. Attention is reported against the bf16 curve, not fitted.
    std::vector<sim::GemmPoint> bf16, fp32;
    for (const GemmMeasurement& g : m.gemm) (g.dtype == core::DType::F32 ? fp32 : bf16).push_back(g.point);
    auto gemm = sim::fitGemmCurve(bf16);
    if (!gemm) return core::makeError("bf16 GEMM fit: " + gemm.error().message);
    auto gemm32 = sim::fitGemmCurve(fp32);
    if (!gemm32) return core::makeError("fp32 GEMM fit: " + gemm32.error().message);
    r.fp32_fit = *gemm32;
    sim::CalibrationFits& fits = r.fits;
    fits.name = profileName(m.gpu_name);
    fits.gemm = *gemm;
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaCheck(cudaSetDevice(0), "cudaSetDevice"));
    check(cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
    fits.memory_bytes = static_cast<int64_t>(total_bytes);
    // The backend's elementwise kernel on the largest buffers: HBM, not L2 (50 MiB on an H100).
    for (const MemoryPoint& p : m.memory) {
        if (p.kernel == "traffic kernel") fits.memory_bytes_per_s = p.bytesPerSecond();
    }
    r.communication_measured = !m.collectives.empty();
    if (r.communication_measured) {
        auto coll = sim::fitCollectiveCurve(m.collectives);
        if (!coll) return core::makeError("collective fit: " + coll.error().message);
        fits.collectives = *coll;
    }
    fits.source = fmt::format(
        "calibrated by `shardcast calibrate --backend cuda{}` on {} at {} with {} x {}: cuBLASLt GEMMs (bf16 and fp32, "
        "fp32 accumulate), the traffic kernel over up to {} MiB, {}",
        options.quick ? " --quick" : "", core::hostName(), core::utcNow(), n, m.gpu_name, sizes.traffic_bytes.back() >> 20,
        r.communication_measured ? fmt::format("NCCL bf16 collectives over {} GPUs of one process (ncclCommInitAll)", n)
                                 : std::string("communication not measured (one GPU)"));

    const std::optional<core::GpuSpec> preset = presetFor(m.gpu_name);
    core::ClusterSpec cluster;
    cluster.gpu = preset ? *preset : *core::findGpuPreset(core::kDefaultGpu);
    cluster.nodes = 1;
    cluster.gpus_per_node = n;
    const sim::HardwareProfile base = sim::HardwareProfile::fromCluster(cluster);
    r.profile = sim::calibratedProfile(fits, base);
    sim::HardwareProfile& p = r.profile;
    // calibratedProfile describes a CPU there: a GPU has its CUDA context, cuBLAS workspace and
    // NCCL buffers, which the preset's figures give.
    p.gpu.cuda_context_bytes = base.gpu.cuda_context_bytes;
    p.gpu.cublas_workspace_bytes = base.gpu.cublas_workspace_bytes;
    p.gpu.nccl_bytes_per_communicator = base.gpu.nccl_bytes_per_communicator;
    // fp32 on the same efficiency curve, at its own peak; fp8 runs as bf16 in the backend (gemm.hpp).
    p.gpu.peak_flops_fp32 = r.fp32_fit.forward_flops_per_s_max / p.forward_efficiency_max;
    p.gpu.peak_flops_fp8 = p.gpu.peak_flops_bf16;
    // The backend's tasks pay no PyTorch dispatch or FSDP hooks (as on the CPU backend).
    p.task_launch_ns = 0;
    p.unit_hook_ns = 0;
    if (m.overlap) {
        p.overlap_compute_slowdown = std::max(1.0, m.overlap->computeSlowdown());
        p.overlap_collective_slowdown = std::max(1.0, m.overlap->collectiveSlowdown());
    }

    const std::string base_name = cluster.gpu.name;
    if (!preset) {
        r.notes.push_back(fmt::format("no preset matches \"{}\": the fields nothing measured are the {} preset's",
                                      m.gpu_name, base_name));
    }
    r.notes.push_back(fmt::format(
        "peak_flops_bf16/fp16/fp8 = the bf16 fit's rate_max (the backend runs fp8 as bf16); peak_flops_fp32 = the fp32 "
        "fit's forward rate_max / forward_efficiency_max; hbm_bytes_per_s = the traffic kernel's bytes read + written "
        "per second; task_launch_ns and unit_hook_ns are 0 (no PyTorch dispatch); host link, network and the CPU "
        "optimizer are the {} preset's (not measured)",
        base_name));
    if (r.communication_measured) {
        r.notes.push_back(fmt::format("collectives measured over {} GPUs of this machine: nvlink_* fields; the network "
                                      "fields stay the preset's (one node)",
                                      n));
    } else {
        r.notes.push_back(fmt::format(
            "communication was not measured: one GPU (run with --gpus N on a machine with N >= 2 GPUs to measure it); "
            "nvlink_*, busbw_half_bytes, latencies and the overlap slowdowns are the {} preset's data-sheet defaults",
            base_name));
    }
    constexpr double kScatteredFit = 0.25;
    if (fits.gemm.rms_relative_error > kScatteredFit) {
        r.notes.push_back(fmt::format("the GEMM fit misses the measured times by {:.0f}% rms", fits.gemm.rms_relative_error * 100));
    }
    auto back = sim::profileFromJson(sim::profileToJson(p), "calibrated profile", base);
    if (!back) return back.error();
    if (!(*back == p)) return core::makeError("calibrated profile does not survive its JSON round trip");
    return r;
}

}  // namespace

std::vector<int64_t> collectiveSizes(bool quick) {
    std::vector<int64_t> sizes;
    const int64_t last = quick ? int64_t{16} << 20 : int64_t{1} << 30;
    for (int64_t s = 1 << 10; s <= last; s *= 4) sizes.push_back(s);
    return sizes;
}

PlanShapes planShapes(const core::Program& program) {
    std::set<std::tuple<int64_t, int64_t, int64_t, bool>> gemms;
    std::set<std::pair<int64_t, int64_t>> attention;
    for (const core::Task& t : program.tasks) {
        const core::OpShape* ops = program.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const core::OpShape& op = ops[i];
            if (op.kind == core::OpShapeKind::Gemm) {
                gemms.insert({op.m, op.n, op.k, t.kind == TaskKind::Backward});
            } else if (op.kind == core::OpShapeKind::Attention) {
                attention.insert({op.seq, op.head_dim});
            }
        }
    }
    PlanShapes out;
    for (const auto& [m, n, k, backward] : gemms) out.gemms.push_back({m, n, k, backward, 0});
    for (const auto& [seq, d] : attention) out.attention.push_back({seq, d, 0});
    return out;
}

std::string cudaProfileName(int device) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "cuda-gpu";
    return profileName(prop.name);
}

core::Result<CudaCalibrationResult> calibrateCuda(const CudaCalibrationOptions& options) {
    try {
        return measureAndFit(options);
    } catch (const std::exception& e) {
        return core::makeError(e.what());
    }
}

}  // namespace shardcast::cuda
