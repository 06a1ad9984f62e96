#pragma once
// Reads a PyTorch CUDA memory snapshot: the file torch.cuda.memory._dump_snapshot(path) writes,
// pickle.dump(torch.cuda.memory._snapshot(), f). A pickle is a program for a stack machine that
// may import and call anything, so this is not an unpickler: it decodes only the opcodes that
// pickle emits for plain data (None, bool, int, float, str, bytes, list, tuple, dict) into a
// value arena and refuses every opcode that would look up or call an object (GLOBAL,
// STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, ...) with its name and byte offset.
// Nothing is trusted: file size, string lengths, nesting, node count and the value stack are
// bounded (SnapshotLimits), memo references are range-checked, a container that would end up
// inside itself is refused, and no code path recurses, so a hostile file cannot exhaust the C++
// stack.
//
// The summary follows torch/utils/viz/MemoryViz.js ("Active Memory Timeline" and "Active Cached
// Memory Timeline"): a block counts from its "alloc" event to its "free_completed" event, a
// segment from "segment_alloc"/"segment_map" to "segment_free"/"segment_unmap". The trace is a
// ring buffer that may start mid-run, so the state before its first event is reconstructed
// BACKWARDS from the final segments: initial = final - (net change over the trace). The curves
// are then replayed forwards from that initial state and end exactly at the final state.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"

namespace shardcast::trace {

struct SnapshotLimits {
    int64_t max_file_bytes = int64_t{2} << 30;     // whole file is read; 2 GiB
    int64_t max_depth = 64;                        // nesting of containers and of MARKs
    int64_t max_string_bytes = int64_t{64} << 20;  // one str or bytes value
    int64_t max_nodes = int64_t{32} << 20;         // values in the arena (about 64 bytes each)
    int64_t max_stack = int64_t{1} << 20;          // entries on the pickle value stack
};

// The actions of a device trace entry (c10 TraceEntry::Action, as the snapshot spells them).
enum class TraceAction : uint8_t {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Unknown,  // an action newer than this reader: counted, otherwise ignored
};
constexpr int kTraceActionCount = 10;
std::string_view traceActionName(TraceAction a);

struct DeviceMemory {
    int64_t device = 0;

    // The final state, from "segments".
    int64_t segments = 0;
    int64_t large_segments = 0;
    int64_t reserved_bytes = 0;             // sum of total_size
    int64_t allocated_bytes = 0;            // sum of size of "active_allocated" blocks
    int64_t pending_free_bytes = 0;         // "active_pending_free": freed, stream work outstanding
    int64_t requested_bytes = 0;            // sum of requested_size of "active_allocated" blocks
    int64_t largest_free_block = 0;         // largest "inactive" block
    int64_t blocks = 0;

    // The trace, from device_traces[device].
    int64_t events = 0;
    std::array<int64_t, kTraceActionCount> action_counts{};
    bool oom = false;
    int64_t oom_requested_bytes = 0;  // size of the last "oom" event

    // Curves: point 0 is the state before the first event, point k the state after event k-1,
    // so each has events + 1 points. "active" = allocated + pending-free, as MemoryViz plots it.
    std::vector<int64_t> active_curve;
    std::vector<int64_t> reserved_curve;
    int64_t initial_active = 0;
    int64_t initial_reserved = 0;
    bool trace_consistent = true;  // false when the reconstructed initial state is negative

    int64_t peak_active = 0;
    int64_t peak_active_point = 0;
    int64_t peak_reserved = 0;
    int64_t peak_reserved_point = 0;             // first point where reserved is at its peak
    int64_t fragmentation_at_reserved_peak = 0;  // reserved - active there
    int64_t max_fragmentation = 0;
    int64_t max_fragmentation_point = 0;
};

struct MemorySnapshot {
    std::vector<DeviceMemory> devices;  // sorted by device; those with segments or trace events
    bool oom = false;
    int64_t values = 0;                  // nodes decoded, for the curious
    std::string allocator_conf;          // allocator_settings["PYTORCH_CUDA_ALLOC_CONF"], if any
    bool expandable_segments = false;    // allocator_settings["expandable_segments"]
    const DeviceMemory* device(int64_t d) const;
};

core::Result<MemorySnapshot> readMemorySnapshot(const std::filesystem::path& path,
                                                const SnapshotLimits& limits = {});
// `where` names the input in error messages (a path, "fuzz", ...).
core::Result<MemorySnapshot> readMemorySnapshotBytes(std::string_view bytes, std::string_view where,
                                                     const SnapshotLimits& limits = {});

}  // namespace shardcast::trace
