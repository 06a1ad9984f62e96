// Plan files (core::planFromJson, docs/plan-format.md): every section, validation, and the model,
// GPU and wrap references a plan names. Relative paths resolve against a folder that does not
// exist, so only bundled names, inline objects and absolute paths reach the file system.
#include "core/plan/plan.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto j = shardcast::fuzz::parseInput(data, size);
    if (!j) return 0;
    (void)shardcast::core::planFromJson(*j, shardcast::fuzz::kWhere, "/nonexistent-shardcast-fuzz");
    return 0;
}
