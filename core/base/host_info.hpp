#pragma once
// Facts about the machine this process runs on, for run records, calibrated profiles and the
// memory checks before a run (Linux: /proc/meminfo, /proc/cpuinfo).
#include <cstdint>
#include <string>
#include <string_view>

namespace shardcast::core {

// A /proc/meminfo field ("MemTotal", "MemAvailable") in bytes; 0 when the file or field is missing.
int64_t meminfoBytes(std::string_view field);
// MemTotal, or the physical pages times the page size where /proc/meminfo is missing.
int64_t physicalMemoryBytes();
// The CPU cores this process may run on (sched_getaffinity: a container's cpuset), else
// std::thread::hardware_concurrency(); at least 1.
int hostCores();
// /proc/cpuinfo's first "model name"; "unknown" when missing.
std::string cpuModelName();
// gethostname; "unknown" when it fails.
std::string hostName();

// Now, UTC, as ISO 8601 to the second ("2026-12-01T08:41:13Z").
std::string utcNow();

}  // namespace shardcast::core
