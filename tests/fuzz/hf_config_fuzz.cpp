// HuggingFace config.json import (core::importHfConfig), as `--model FILE` reads a file without
// "format". An import that succeeds must give a model with at least one block and one parameter.
#include <cstdlib>

#include "core/model/model_io.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto j = shardcast::fuzz::parseInput(data, size);
    if (!j) return 0;
    auto model = shardcast::core::importHfConfig(*j, "fuzz", shardcast::fuzz::kWhere);
    if (model && (model->blocks.empty() || model->params.empty() || model->arch.layers < 1)) std::abort();
    return 0;
}
