#pragma once
// What the executor needs from a machine to run a Program for real (DESIGN.md section 6). The
// executor owns the schedule (host issue order, streams, dependencies, memory events); a backend
// owns the device: memory, kernels, collectives and the ranks' meeting point.
//
// Threads: the executor runs one worker thread per stream the Program uses and calls runTask
// from it, synchronously: a stream's tasks arrive in Program order from that one thread, tasks of
// different streams concurrently. A CUDA backend drives one CUDA stream per worker (enqueue, then
// synchronize that stream); cross-stream dependencies are then already satisfied by the executor
// when a task is called (the CUDA backend also waits their CUDA events, backend_cuda/cuda_backend.hpp).
#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/result.hpp"
#include "core/program/program.hpp"

namespace shardcast::exec {

class Backend {
public:
    virtual ~Backend() = default;

    virtual std::string_view name() const = 0;  // "cpu", "cuda", "null"
    virtual int32_t rank() const = 0;
    virtual int32_t worldSize() const = 0;

    // Once per Program, before any step and from the host thread: build what its tasks need
    // (a communicator per stream and process group, kernel scratch). Every rank calls it.
    virtual core::Status prepare(const core::Program& program) = 0;

    // Device memory for the counting allocator, with its pages touched so that it is really
    // resident; never null for bytes > 0 (throws std::bad_alloc). Any thread.
    virtual void* allocate(int64_t bytes) = 0;
    virtual void release(void* ptr, int64_t bytes) noexcept = 0;

    // Runs the kernels (compute tasks) or the collective (collectives) of task `id` of step
    // `step` and returns once it has completed. Called from the worker thread of the task's stream.
    virtual core::Status runTask(const core::Program& program, int32_t id, int32_t step) = 0;

    // Every rank meets here before each step; the step's time zero is taken on leaving it.
    virtual core::Status barrier() = 0;

    // A task failed on this rank. A multi-rank backend must end every rank here (its peers may be
    // blocked in a collective waiting for this one) after printing `error`; a single-process one
    // returns and the executor stops its workers.
    virtual void abortRun(const core::Error& error) noexcept = 0;
};

}  // namespace shardcast::exec
