#pragma once
// A lower bound on what the caching allocator model (core/memory/caching_allocator.hpp) reserves over a
// step, read off the allocated-only figures: lets a search rule out a configuration on reserved
// memory without replaying the allocator (MemoryTimer::replayAllocator).
#include <cstdint>

#include "core/memory/timed_memory.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

// A lower bound on the judged peak (reserved + Runtime Overhead, core::FitVerdict) of `program`
// replayed through the caching allocator, given its timed memory curve, valid when the replay
// releases no cached segment (a replay that must release cannot fit: it is at risk whatever it
// reserves). The argument:
//  - the allocator gives nothing back to the device during a step unless it frees its cache, and
//    a block serves only the stream that allocated it, so at the end of the replayed step each
//    stream s still reserves at least M_s, the most it ever had allocated: the peak reserved is at
//    least the sum of the M_s;
//  - the replay applies the timed curve's events in the curve's order, the steady state
//    (Program::initial) on the compute stream; Runtime Overhead is not the allocator's. A category
//    whose bytes are all allocated on one stream (read off Program::mem) is that stream's, so M_s
//    is at least L_s, the larger of such a category's maximum over the step and the sum of the
//    stream's own categories at the allocated peak;
//  - hence sum_s M_s >= sum_s L_s, and sum_s M_s >= A + sum_{s != compute} max(0, L_s - U_s), with A
//    the allocated peak (Runtime Overhead aside: what the streams hold then) and U_s the bytes of
//    every category allocated on s at that peak, at least what s holds then: take M_s for the
//    streams where L_s > U_s and what the others hold at the peak (A less at most U_s for each
//    stream taken).
// The result adds Runtime Overhead (Program::initial) to the larger of the two.
int64_t reservedFloorBytes(const Program& program, const TimedMemory& timed);

}  // namespace shardcast::core
