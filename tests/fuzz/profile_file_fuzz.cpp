// Hardware profiles (sim::profileFromJson), as `--profile FILE` applies one over the cluster's
// defaults (here an H100-SXM node's). A profile that loads must write back to JSON that loads to the
// same profile.
#include <cstdlib>

#include "core/plan/cluster.hpp"
#include "simulator/hardware_profile.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardcast;
    auto j = fuzz::parseInput(data, size);
    if (!j) return 0;
    static const sim::HardwareProfile base =
        sim::HardwareProfile::fromCluster(core::ClusterSpec{*core::findGpuPreset("H100-SXM"), 1, 8});
    auto profile = sim::profileFromJson(*j, fuzz::kWhere, base);
    if (!profile) return 0;
    auto again = sim::profileFromJson(sim::profileToJson(*profile), "round trip", base);
    if (!again || !(*again == *profile)) std::abort();
    return 0;
}
