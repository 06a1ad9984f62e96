// CUDA memory snapshots (trace::readMemorySnapshotBytes): the restricted pickle decoder and the
// summary. Small limits make the size, depth, node and stack checks reachable.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trace/memory_snapshot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    trace::SnapshotLimits limits;
    limits.max_file_bytes = 1 << 20;
    limits.max_depth = 16;
    limits.max_string_bytes = 4096;
    limits.max_nodes = 100'000;
    limits.max_stack = 10'000;
    (void)trace::readMemorySnapshotBytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz",
                                         limits);
    return 0;
}
