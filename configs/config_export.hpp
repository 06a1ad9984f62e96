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

// accelerate's config YAML (distributed_type FSDP, mixed_precision, the machines and processes,
// fsdp_config, parallelism_config for FSDP2's HSDP, dynamo_config): what accelerate carries. The
// model, batch, sequence length, optimizer and clipping are the training script's: a comment names
// their flags, which --from-config FILE.yaml needs beside it to give the same plan.
core::Result<std::string> accelerateYaml(const core::Plan& plan, const core::Mesh& mesh);

// HF Trainer's TrainingArguments JSON (fsdp, fsdp_config, per_device_train_batch_size,
// gradient_accumulation_steps, bf16 / fp16, max_grad_norm, optim, torch_compile): the model, the
// sequence length and the GPUs are the script's and the launcher's.
core::Result<std::string> hfTrainerJson(const core::Plan& plan, const core::Mesh& mesh);

}  // namespace shardcast::configs
