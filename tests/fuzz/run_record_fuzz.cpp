// Run records (core::runRecordFromJson, what `compare` and `db import` read) and the step documents
// inside them and beside a prediction (core/results/step_io.hpp: timeline, timed memory, step summary). Each
// reader refuses a document of another kind by its "format", so one input exercises the one it names.
#include "core/results/run_record.hpp"
#include "core/results/step_io.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    auto j = fuzz::parseInput(data, size);
    if (!j) return 0;
    (void)core::runRecordFromJson(*j, fuzz::kWhere);
    (void)core::timelineFromJson(*j, fuzz::kWhere);
    (void)core::timedMemoryFromJson(*j, fuzz::kWhere);
    (void)core::stepSummaryFromJson(*j, fuzz::kWhere);
    return 0;
}
