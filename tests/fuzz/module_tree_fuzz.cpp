// Module-tree import (core::importModuleTree, docs/module-tree-format.md), as `--model FILE` reads a
// file with "format".
#include "core/model/model_io.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto j = shardcast::fuzz::parseInput(data, size);
    if (!j) return 0;
    (void)shardcast::core::importModuleTree(*j, "fuzz", shardcast::fuzz::kWhere);
    return 0;
}
