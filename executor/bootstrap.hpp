#pragma once
// How the ranks of a multi-rank backend meet: world rank and size, an all-gather of a few bytes
// over all ranks (NCCL's unique ids travel through it), a barrier, and an abort that ends the run
// on every rank. Implemented over MPI (one process per rank, apps/shardcast/cmd/cmd_run.cpp) and by
// InProcessWorld (one thread per rank, executor/in_process_world.hpp).
#include <cstdint>
#include <string>

#include "core/base/result.hpp"

namespace shardcast::exec {

class Bootstrap {
public:
    virtual ~Bootstrap() = default;
    virtual int32_t rank() const = 0;
    virtual int32_t worldSize() const = 0;
    // `all` receives worldSize() * bytes: rank r's `mine` at r * bytes. Every rank passes the same
    // `bytes`. Errors: the run was aborted (by any rank), or the transport failed.
    virtual core::Status allGather(const void* mine, int64_t bytes, void* all) = 0;
    virtual core::Status barrier() = 0;
    // Ends the run on every rank with `message`. A process-per-rank implementation ends the
    // processes and never returns; an in-process one makes every rank's pending and later calls
    // fail with the message, and returns.
    virtual void abort(const std::string& message) noexcept = 0;
};

}  // namespace shardcast::exec
