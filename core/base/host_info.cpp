#include "core/base/host_info.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <fstream>
#include <thread>

namespace shardcast::core {

int64_t meminfoBytes(std::string_view field) {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    // Lines are "MemTotal:       24664072 kB".
    while (in >> key >> kib) {
        in.ignore(256, '\n');
        if (key.size() == field.size() + 1 && key.back() == ':' && key.compare(0, field.size(), field) == 0) {
            return kib * 1024;
        }
    }
    return 0;
}

int64_t physicalMemoryBytes() {
    if (const int64_t total = meminfoBytes("MemTotal"); total > 0) return total;
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

int hostCores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        if (const int n = CPU_COUNT(&set); n > 0) return n;
    }
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string cpuModelName() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        if (const auto colon = line.find(':'); colon != std::string::npos) {
            std::string model = line.substr(colon + 1);
            model.erase(0, model.find_first_not_of(' '));
            return model;
        }
    }
    return "unknown";
}

std::string hostName() {
    std::array<char, 256> name{};
    if (gethostname(name.data(), name.size() - 1) != 0) return "unknown";
    return name.data();
}

std::string utcNow() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace shardcast::core
