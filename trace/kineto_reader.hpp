#pragma once
// Reads one torch.profiler (Kineto) trace file: the Chrome-trace JSON that export_chrome_trace and
// tensorboard_trace_handler write, plain or gzipped. The file is streamed: it is inflated and
// scanned chunk by chunk, each event is cut out of the traceEvents array and parsed with simdjson,
// so memory stays bounded by the events kept (about 64 bytes each), never by a DOM of the file.
// Only complete events ("ph": "X") and the profiler's "[memory]" instant events are kept; every
// other event is counted. Nothing in a trace is trusted: sizes, nesting, numbers and strings are
// bounded (ReadLimits) and every violation is an error naming the file and the event.
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"

namespace shardcast::trace {

// Kineto's "cat" values, old and new spellings folded ("kernel"/"Kernel", "cpu_op"/"Operator").
enum class Category : uint8_t {
    CpuOp,              // aten ops, record_param_comms, gloo/nccl op spans
    UserAnnotation,     // record_function labels: FSDP hooks, ProfilerStep#N, Optimizer.step
    GpuUserAnnotation,  // the same labels projected onto a GPU stream
    Kernel,             // a GPU kernel on a stream
    Memcpy,
    Memset,
    Runtime,            // cudaLaunchKernel, cudaStreamWaitEvent, ...
    Driver,
    PythonFunction,
    Other,
};
constexpr int kCategoryCount = 10;
std::string_view categoryName(Category c);

struct Event {
    int64_t ts_ns = 0;     // from the trace's own clock (microseconds in the file, kept to the ns)
    int64_t dur_ns = 0;
    int64_t pid = 0;       // process (CPU) or device (GPU); string pids are interned as negatives
    int64_t tid = 0;       // thread (CPU) or stream (GPU)
    uint32_t name = 0;     // index into RankTrace::names
    Category category = Category::Other;
    int32_t stream = -1;          // args.stream of GPU events
    int32_t group_size = 0;       // args "Group size" of a collective (record_param_comms, nccl:*)
    int64_t in_nelems = 0;        // args "In msg nelems"
    int64_t out_nelems = 0;       // args "Out msg nelems"
    int64_t correlation = 0;      // args "correlation": links a launch (Runtime, Driver) to the GPU work it queued; 0: none
    int64_t endNs() const { return ts_ns + dur_ns; }
};

// A "[memory]" instant event: one allocation (bytes > 0) or free (< 0) and the device's totals after it.
struct MemoryEvent {
    int64_t ts_ns = 0;
    int64_t bytes = 0;
    int64_t total_allocated = 0;
    int64_t total_reserved = 0;
    int32_t device_type = 0;  // c10::DeviceType: 0 CPU, 1 CUDA
    int32_t device_id = -1;
};

struct ReadLimits {
    int64_t max_file_bytes = int64_t{4} << 30;      // inflated JSON
    int64_t max_event_bytes = int64_t{16} << 20;    // one event's JSON text
    int64_t max_events = 200'000'000;               // events kept
    int32_t max_depth = 64;                         // nesting inside one event or a top-level value
    int64_t max_top_value_bytes = int64_t{64} << 20;  // a top-level value other than traceEvents
};

struct RankTrace {
    std::filesystem::path path;
    std::optional<int32_t> rank;        // distributedInfo.rank
    std::optional<int32_t> world_size;  // distributedInfo.world_size
    std::string backend;                // distributedInfo.backend ("nccl", "gloo"), empty when absent
    std::optional<int64_t> base_time_ns;  // baseTimeNanoseconds
    std::string trace_name;             // traceName, when present (identifies a run across ranks)
    std::vector<std::string> names;     // interned event names
    std::vector<Event> events;          // complete events, in file order
    std::vector<MemoryEvent> memory;    // "[memory]" events, in file order
    int64_t events_read = 0;            // every element of traceEvents
    int64_t events_skipped = 0;         // elements not kept: metadata, flows, counters, other instants
    int64_t bytes_read = 0;             // inflated JSON bytes scanned
    std::array<int64_t, kCategoryCount> per_category{};

    std::string_view name(const Event& e) const { return names[e.name]; }
};

// Reads `path` (gzip when it starts with the gzip magic, whatever its name). Errors name the file
// and, for a bad event, its index in traceEvents.
core::Result<RankTrace> readKinetoTrace(const std::filesystem::path& path, const ReadLimits& limits = {});
// The same from bytes in memory (tests, fuzzing); `where` names them in errors.
core::Result<RankTrace> readKinetoTraceBytes(std::string_view bytes, const std::string& where,
                                             const ReadLimits& limits = {});

}  // namespace shardcast::trace
