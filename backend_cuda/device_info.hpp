#pragma once
// What the CUDA backend can learn about the machine before running anything.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/base/result.hpp"

namespace shardcast::cuda {

// The number of CUDA devices this process sees (cudaGetDeviceCount). Errors: no driver, a driver
// older than the runtime, or no device: the message names cudaGetDeviceCount and CUDA's text.
core::Result<int> usableDevices();

// cudaMemGetInfo on `device`: free and total bytes.
struct DeviceMemory {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
};
core::Result<DeviceMemory> deviceMemory(int device);

// The run record's environment for `device`: GPU name, compute capability, memory, SM and memory
// clocks (peak, kHz as CUDA reports them), driver / runtime / NCCL / cuBLASLt versions; from NVML
// when the driver provides libnvidia-ml.so.1 (dlopen, not linked), the enforced power limit (W)
// and the SM clock now (MHz), otherwise "power_limit" says why they were not read.
nlohmann::json environment(int device);

}  // namespace shardcast::cuda
