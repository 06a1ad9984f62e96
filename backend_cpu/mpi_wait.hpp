#pragma once
// How the CPU backend, and the calibration that measures it, wait for a nonblocking collective.
#include <cstdint>

#include <mpi.h>

#include "core/base/result.hpp"

namespace shardcast::cpu {

// Waits for `request`, driving MPI's progress with MPI_Test. A blocking MPI call spins at full
// speed; with several stream threads per rank and more threads than cores, the spinning steals the
// CPU from the very peers (and this rank's compute) it waits for, and a step slows down by orders
// of magnitude. So: spin briefly (short messages finish in microseconds), then yield, then sleep
// 20 us between tests. A nonblocking collective progresses only while a thread tests it, so the
// waiting thread's timer slack is set to 1 us (Linux's default, 50 us, made each sleep ~70 us and
// doubled the time of multi-MiB reductions). Errors name `call` and `rank` (mpiCheck).
core::Status waitPolitely(MPI_Request& request, const char* call, int32_t rank);

}  // namespace shardcast::cpu
