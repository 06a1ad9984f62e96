// GPU JSON files (core::gpuFromJson), as `--gpu FILE` and a plan's "gpu" read them. A GPU that loads
// must write back to JSON that loads to the same GPU.
#include <cstdlib>

#include "core/plan/cluster.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    auto j = fuzz::parseInput(data, size);
    if (!j) return 0;
    auto gpu = core::gpuFromJson(*j, fuzz::kWhere);
    if (!gpu) return 0;
    auto again = core::gpuFromJson(core::gpuToJson(*gpu), "round trip");
    if (!again || !(*again == *gpu)) std::abort();
    return 0;
}
