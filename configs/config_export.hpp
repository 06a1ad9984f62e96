#pragma once
// A plan written as a framework's config (issue 26, `--emit torchtitan FILE`): the inverse of
// configs/config_import.hpp, so that what it writes reads back to the same plan (the tests check
// the round trip). A plan the framework cannot express (a wrap other than one unit per block, FSDP1,
// a checkpointing mode torchtitan lacks, a model without a torchtitan flavor, ...) is an error that
// names the plan field and what the framework offers.
#include <string>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"

namespace shardcast::configs {

// torchtitan's TOML job config ([model], [training], [parallelism], [activation_checkpoint],
// [compile], [checkpoint], [optimizer]); `mesh` is validatePlan's.
core::Result<std::string> torchtitanToml(const core::Plan& plan, const core::Mesh& mesh);

}  // namespace shardcast::configs
