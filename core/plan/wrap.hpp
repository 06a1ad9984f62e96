#pragma once
// Resolving a wrap policy into FSDP units (the modules each fully_shard call covers).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"
#include "core/model/model.hpp"
#include "core/plan/sharding.hpp"

namespace shardcast::core {

struct UnitSpec {
    std::string name;              // "(root)", "model.layers.3", "model.layers.0..3"
    std::vector<int32_t> modules;  // modules the unit covers; {0} for the root
};

struct UnitAssignment {
    std::vector<UnitSpec> units;        // units[0] is the root; the rest in creation order
    std::vector<int32_t> module_unit;   // innermost unit that owns each module's parameters
    std::vector<int32_t> parent_unit;   // enclosing unit of each unit (-1 for the root)
};

// Whole: the root only. Block: one unit per transformer block. EveryK: K consecutive blocks per
// unit (fully_shard on a list of modules). MinParams: post-order like FSDP's
// size_based_auto_wrap_policy: a module is wrapped when the parameters not already in wrapped
// descendants reach the threshold; ModuleLists/ModuleDicts are never wrapped. Modules: the given
// FQNs ("a+b" = one unit of several modules).
Status resolveUnits(const Model& model, const WrapPolicy& wrap, UnitAssignment& out);

// The modules of one WrapPolicy::modules entry: "a+b" -> {"a", "b"} (parts as written).
std::vector<std::string_view> splitUnitEntry(std::string_view entry);

}  // namespace shardcast::core
