#pragma once
// Checks that a Program keeps the contracts of core/program/program.hpp, so that an executor can run it:
// dependencies point to earlier tasks, spans lie inside their pools, collectives name a process
// group of the right size, every free names a live buffer of the same size, category and stream,
// no category goes negative when the events are replayed in issue order, and every buffer the
// step allocates is freed by its end (the step ends in Program::initial).
#include "core/base/result.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

// The first violation found, as "task 17 (RS layers.3): ..." naming the task and what is wrong.
Status validateProgram(const Program& program);

}  // namespace shardcast::core
