#include "backend_cuda/device_info.hpp"

#include <dlfcn.h>

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

// NVML, when the driver installs it, read through dlopen: the build needs no NVML header or
// library and a machine without the driver still runs. Signatures of NVML's public C API (nvml.h):
// nvmlReturn_t is an int enum (0 = NVML_SUCCESS), nvmlDevice_t an opaque pointer, clock type 1 =
// NVML_CLOCK_SM; power in milliwatts, clocks in MHz.
void addNvml(nlohmann::json& env, const std::string& pci_bus_id) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        env["power_limit"] = "not read (libnvidia-ml.so.1 not found)";
        return;
    }
    using Init = int (*)();
    using ByBus = int (*)(const char*, void**);
    using UIntOf = int (*)(void*, unsigned int*);
    using ClockOf = int (*)(void*, int, unsigned int*);
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    auto shutdown = reinterpret_cast<Init>(dlsym(lib, "nvmlShutdown"));
    auto by_bus = reinterpret_cast<ByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    auto power = reinterpret_cast<UIntOf>(dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit"));
    auto clock = reinterpret_cast<ClockOf>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    void* device = nullptr;
    if (init == nullptr || shutdown == nullptr || by_bus == nullptr || init() != 0) {
        env["power_limit"] = "not read (NVML did not initialise)";
        dlclose(lib);
        return;
    }
    if (!pci_bus_id.empty() && by_bus(pci_bus_id.c_str(), &device) == 0) {
        unsigned int milliwatts = 0, mhz = 0;
        if (power != nullptr && power(device, &milliwatts) == 0) env["power_limit_w"] = milliwatts / 1000.0;
        if (clock != nullptr && clock(device, 1, &mhz) == 0) env["sm_clock_now_mhz"] = mhz;
    }
    if (!env.contains("power_limit_w")) env["power_limit"] = "not read (NVML had no answer for this device)";
    shutdown();
    dlclose(lib);
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
        if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess) env["pci_bus_id"] = std::string(bus);
    }
    env["device_index"] = device;
    if (const int khz = attribute(cudaDevAttrClockRate, device); khz >= 0) env["sm_clock_peak_khz"] = khz;
    if (const int khz = attribute(cudaDevAttrMemoryClockRate, device); khz >= 0) env["memory_clock_peak_khz"] = khz;
    int driver = 0, runtime = 0, nccl = 0;
    // cudaDriverGetVersion gives 0 when no driver is installed.
    env["cuda_driver"] = cudaDriverGetVersion(&driver) != cudaSuccess ? "unknown" : driver == 0 ? "none" : cudaVersion(driver);
    env["cuda_runtime"] = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cudaVersion(runtime) : "unknown";
    // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch (nccl.h).
    env["nccl"] = ncclGetVersion(&nccl) == ncclSuccess ? fmt::format("{}.{}.{}", nccl / 10000, (nccl / 100) % 100, nccl % 100)
                                                       : "unknown";
    const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
    env["cublaslt"] = fmt::format("{}.{}.{}", lt / 10000, (lt / 100) % 100, lt % 100);
    addNvml(env, env.value("pci_bus_id", std::string()));
    return env;
}

}  // namespace shardcast::cuda
