#include "backend_cuda/device_info.hpp"

#include <string>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "backend_cuda/cuda_check.hpp"

namespace shardcast::cuda {
namespace {

// CUDA's integer versions: 1000 * major + 10 * minor (cudaDriverGetVersion, cudaRuntimeGetVersion).
std::string cudaVersion(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

int attribute(cudaDeviceAttr attr, int device) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) return -1;
    return value;
}

}  // namespace

core::Result<int> usableDevices() {
    int count = 0;
    if (auto s = cudaCheck(cudaGetDeviceCount(&count), "cudaGetDeviceCount"); !s) return s.error();
    if (count <= 0) return core::makeError("cudaGetDeviceCount reports no CUDA device");
    return count;
}

core::Result<DeviceMemory> deviceMemory(int device) {
    SHARDCAST_CUDA_TRY(cudaCheck, cudaSetDevice(device));
    size_t free_bytes = 0, total_bytes = 0;
    SHARDCAST_CUDA_TRY(cudaCheck, cudaMemGetInfo(&free_bytes, &total_bytes));
    return DeviceMemory{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

nlohmann::json environment(int device) {
    nlohmann::json env = nlohmann::json::object();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
        env["gpu"] = prop.name;
        env["compute_capability"] = fmt::format("{}.{}", prop.major, prop.minor);
        env["gpu_memory_bytes"] = static_cast<int64_t>(prop.totalGlobalMem);
        env["sm_count"] = prop.multiProcessorCount;
        char bus[32] = {};
        if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess) env["pci_bus_id"] = bus;
    }
    env["device_index"] = device;
    env["sm_clock_peak_khz"] = attribute(cudaDevAttrClockRate, device);
    env["memory_clock_peak_khz"] = attribute(cudaDevAttrMemoryClockRate, device);
    int driver = 0, runtime = 0, nccl = 0;
    env["cuda_driver"] = cudaDriverGetVersion(&driver) == cudaSuccess ? cudaVersion(driver) : "unknown";
    env["cuda_runtime"] = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cudaVersion(runtime) : "unknown";
    // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch (nccl.h).
    env["nccl"] = ncclGetVersion(&nccl) == ncclSuccess ? fmt::format("{}.{}.{}", nccl / 10000, (nccl / 100) % 100, nccl % 100)
                                                       : "unknown";
    const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
    env["cublaslt"] = fmt::format("{}.{}.{}", lt / 10000, (lt / 100) % 100, lt % 100);
    env["power_limit"] = "not read (NVML is not linked in this build)";
    return env;
}

}  // namespace shardcast::cuda
