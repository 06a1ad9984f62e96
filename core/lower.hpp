#pragma once
#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/result.hpp"

namespace shardcast::core {

// Lowers a validated plan into `out` (cleared first; its capacity is reused, so lowering many
// plans into one Program allocates little). Follows DESIGN.md section 3 rule by rule.
Status lower(const Plan& plan, const Mesh& mesh, Program& out);

}  // namespace shardcast::core
