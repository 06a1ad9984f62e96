// torch.profiler traces (trace::readKinetoTraceBytes, what `import-trace` and `compare --torch-trace`
// read): plain or gzipped JSON, streamed event by event. Small limits make the size checks reachable.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trace/kineto_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    trace::ReadLimits limits;
    limits.max_file_bytes = 1 << 20;
    limits.max_event_bytes = 4096;
    limits.max_events = 10'000;
    limits.max_top_value_bytes = 4096;
    (void)trace::readKinetoTraceBytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", limits);
    return 0;
}
