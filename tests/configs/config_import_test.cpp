// torchtitan TOML job configs read into a plan (configs/config_import.hpp): two configs written as
// torchtitan's train configs are, checked field by field; and every way a config can be refused.
#include <gtest/gtest.h>

#include <string>

#include "configs/config_import.hpp"
#include "core/plan/plan.hpp"

namespace shardcast::configs {
namespace {

const std::string kData = std::string(SHARDCAST_SOURCE_DIR) + "/tests/data/configs/";

core::Plan planOf(const ImportedConfig& c) {
    auto plan = core::buildPlan(c.overrides);
    EXPECT_TRUE(plan.ok()) << plan.error().message;
    auto mesh = core::validatePlan(*plan);
    EXPECT_TRUE(mesh.ok()) << mesh.error().message;
    return *plan;
}

core::Plan build(const core::PlanOverrides& o) {
    ImportedConfig c;
    c.overrides = o;
    return planOf(c);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

// 405B with tp 8 on 16 nodes of 8: data_parallel_shard_degree -1 takes the 128 / 8 = 16 ranks left.
TEST(TorchtitanTomlTest, Llama405BTp8FieldByField) {
    ConfigContext context;
    context.world = 128;
    auto c = importConfigFile(kData + "torchtitan-llama3-405b-tp8.toml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->format, "torchtitan TOML");
    const core::Plan plan = planOf(*c);
    EXPECT_EQ(plan.model_ref, "llama-3.1-405b");
    EXPECT_EQ(plan.training.impl, core::ModelImpl::Torchtitan);
    EXPECT_EQ(plan.cluster.nodes, 16);
    EXPECT_EQ(plan.cluster.gpus_per_node, 8);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::FullShard);
    EXPECT_EQ(plan.sharding.fsdp_version, 2);
    EXPECT_EQ(plan.sharding.tp, 8);
    EXPECT_TRUE(plan.sharding.sequence_parallel);
    EXPECT_TRUE(plan.sharding.loss_parallel);
    EXPECT_TRUE(plan.sharding.async_tp);
    EXPECT_EQ(plan.sharding.pp, 1);
    // local_batch_size 2, global batch -1 = 2 x 16 ranks: one micro-batch of 2 per step.
    EXPECT_EQ(plan.training.micro_batch, 2);
    EXPECT_EQ(plan.training.grad_accum, 1);
    EXPECT_EQ(plan.training.seq_len, 8192);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::Full);
    EXPECT_EQ(plan.training.kernels, core::KernelImpl::Compile);
    EXPECT_EQ(plan.training.optimizer, core::Optimizer::AdamWFused);  // optimizer.implementation's default: fused
    EXPECT_EQ(plan.training.master_dtype, core::DType::F32);
    EXPECT_EQ(plan.training.param_dtype, core::DType::BF16);
    EXPECT_EQ(plan.training.reduce_dtype, core::DType::F32);
    EXPECT_EQ(plan.checkpoint.mode, core::CheckpointMode::None);  // enable = false
    EXPECT_EQ(plan.training.clip_grad_norm, 1.0);  // training.max_norm = 1.0: torchtitan clips every step
    // Nothing dropped silently: what has no effect is listed.
    for (const char* k : {"[job]", "[profiling]", "[metrics]", "[lr_scheduler]", "model.hf_assets_path", "optimizer.lr",
                          "optimizer.eps", "training.steps", "training.dataset", "checkpoint.folder"}) {
        EXPECT_TRUE(contains(c->ignored, k)) << k;
    }
}

// A 3D mesh: HSDP 2 x 4, tp 2, pp 4 Interleaved1F1B (torchtitan's default of 2 stages per rank),
// micro-batches of pipeline_parallel_microbatch_size 1 out of global 64 / 8 data-parallel ranks.
TEST(TorchtitanTomlTest, Llama8B3DFieldByField) {
    ConfigContext context;  // the mesh gives the world: 2 x 4 x 2 x 4 = 64
    auto c = importConfigFile(kData + "torchtitan-llama3-8b-3d.toml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    const core::Plan plan = planOf(*c);
    EXPECT_EQ(plan.model_ref, "llama-3.1-8b");
    EXPECT_EQ(plan.cluster.nodes * plan.cluster.gpus_per_node, 64);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::HybridShard);
    EXPECT_EQ(plan.sharding.shard_size, 4);
    EXPECT_EQ(plan.sharding.tp, 2);
    EXPECT_EQ(plan.sharding.pp, 4);
    EXPECT_EQ(plan.sharding.pp_schedule, core::PpSchedule::Interleaved1F1B);
    EXPECT_EQ(plan.sharding.pp_virtual_stages, 2);
    EXPECT_EQ(plan.training.micro_batch, 1);
    EXPECT_EQ(plan.training.grad_accum, 8);
    EXPECT_EQ(plan.training.seq_len, 4096);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::Op);
    EXPECT_EQ(plan.training.kernels, core::KernelImpl::Eager);
    EXPECT_EQ(plan.checkpoint.mode, core::CheckpointMode::Sharded);
    EXPECT_EQ(plan.checkpoint.every_steps, 100);
    bool async_said = false;
    for (const std::string& m : c->mapped) async_said = async_said || m.find("async_mode async") != std::string::npos;
    EXPECT_TRUE(async_said);
    // A world from the command line that disagrees with the config's mesh is named.
    context.world = 32;
    auto disagree = importConfigFile(kData + "torchtitan-llama3-8b-3d.toml", context);
    ASSERT_FALSE(disagree.ok());
    EXPECT_NE(disagree.error().message.find("the config's mesh is 64 GPUs"), std::string::npos) << disagree.error().message;
}

// Non-ASCII text in comments and strings is read (as torchtitan's own configs may hold it).
TEST(TorchtitanTomlTest, NonAsciiInCommentsAndStringsIsRead) {
    ConfigContext context;
    context.world = 8;
    auto c = importTorchtitanToml("# 8-way TP \xe2\x80\x94 inside a node\n[job]\ndescription = \"Llama 3 \xe2\x80\x94 8B\"\n"
                                  "[model]\nflavor = \"8B\" # caf\xc3\xa9\n",
                                  "t.toml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(*c->overrides.model, "llama-3.1-8b");
}

// torchtitan's float8 converter as its Llama 3 benchmark configs set it (docs/float8.md): the
// fp8 all-gather with precomputed scales.
TEST(TorchtitanTomlTest, Float8ConverterWithFp8AllGather) {
    ConfigContext context;
    context.world = 8;
    auto c = importTorchtitanToml("[model]\nflavor = \"8B\"\nconverters = [\"float8\"]\n[float8]\n"
                                  "enable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true\n"
                                  "filter_fqns = [\"output\"]\nemulate = false\n",
                                  "t.toml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(planOf(*c).training.all_gather_dtype, core::AllGatherDtype::Fp8);
}

// torchtitan's defaults apply to what a config leaves out: selective checkpointing of every 2nd
// layer, local batch 8, sequence 2,048, 1F1B.
TEST(TorchtitanTomlTest, AbsentKeysTakeTorchtitansDefaults) {
    ConfigContext context;
    context.world = 8;
    auto c = importTorchtitanToml("[model]\nflavor = \"8B\"\n[parallelism]\npipeline_parallel_degree = 2\n", "t.toml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    const core::Plan plan = planOf(*c);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::Layer);
    EXPECT_EQ(plan.training.ac_every, 2);
    EXPECT_EQ(plan.training.seq_len, 2048);
    EXPECT_EQ(plan.training.micro_batch, 1);  // pipeline_parallel_microbatch_size 1
    EXPECT_EQ(plan.training.grad_accum, 8);   // local_batch_size 8 per data-parallel rank
    EXPECT_EQ(plan.sharding.pp_schedule, core::PpSchedule::OneFOneB);
    EXPECT_EQ(plan.sharding.pp_virtual_stages, 1);
    EXPECT_EQ(plan.training.clip_grad_norm, 1.0);  // training.max_norm's default: clipped every step
    auto clip = importTorchtitanToml("[model]\nflavor = \"8B\"\n[training]\nmax_norm = 2\n", "t.toml", context);
    ASSERT_TRUE(clip.ok()) << clip.error().message;
    EXPECT_EQ(planOf(*clip).training.clip_grad_norm, 2.0);  // an integer is a number too (float | int)
    auto foreach = importTorchtitanToml("[model]\nflavor = \"8B\"\n[optimizer]\nimplementation = \"foreach\"\n", "t.toml", context);
    ASSERT_TRUE(foreach.ok()) << foreach.error().message;
    EXPECT_EQ(planOf(*foreach).training.optimizer, core::Optimizer::AdamW);
    // pipeline_parallel_layers_per_stage: ceil((32 + 2) / 9) = 4 stages over 2 ranks, 2 each.
    auto lps = importTorchtitanToml(
        "[model]\nflavor = \"8B\"\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "
        "\"Interleaved1F1B\"\npipeline_parallel_layers_per_stage = 9\n",
        "t.toml", context);
    ASSERT_TRUE(lps.ok()) << lps.error().message;
    EXPECT_EQ(planOf(*lps).sharding.pp_virtual_stages, 2);
}

void expectRefused(const std::string& toml, const std::string& named, std::optional<int64_t> world = 64) {
    ConfigContext context;
    context.world = world;
    auto c = importTorchtitanToml(toml, "job.toml", context);
    ASSERT_FALSE(c.ok()) << toml;
    EXPECT_NE(c.error().message.find(named), std::string::npos) << c.error().message;
    EXPECT_EQ(c.error().message.rfind("job.toml: ", 0), 0u) << c.error().message;
}

TEST(TorchtitanTomlTest, RefusalsNameTheKeyAndWhatIsValid) {
    expectRefused("[model\nflavor = 8B\n", "malformed TOML at line 1");
    // A table header cut short: toml++ 3.3 asserts here (found by fuzzing); an error all the same.
    expectRefused("[\n", "malformed TOML");
    // Non-ASCII outside strings and comments (toml++ 3.3's Unicode tables are not safe on it).
    expectRefused("e\xcf\x9d = 1\n", "malformed TOML at line 1, column 2: a non-ASCII character");
    expectRefused("[model]\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degre = 2\n",
                  "unknown key parallelism.tensor_parallel_degre; torchtitan's [parallelism] keys shardcast knows:");
    expectRefused("[modle]\nflavor = \"8B\"\n", "unknown torchtitan section [modle]");
    expectRefused("[model]\nflavor = \"1B\"\n", "model.flavor is '1B'; valid: 8B, 70B, 405B");
    expectRefused("[model]\nflavor = \"8B\"\nconverters = [\"mx\"]\n", "model.converters is [mx]: shardcast models torchao float8");
    expectRefused("[model]\nflavor = \"8B\"\nconverters = [\"float8\"]\n",
                  "float8.enable_fsdp_float8_all_gather is false: float8 GEMMs with a bf16 all-gather are not modelled");
    expectRefused("[model]\nflavor = \"8B\"\nconverters = [\"float8\"]\n[float8]\nenable_fsdp_float8_all_gather = true\n",
                  "float8.precompute_float8_dynamic_scale_for_fsdp is false");
    expectRefused("[model]\nflavor = \"8B\"\nconverters = [\"float8\"]\n[float8]\nenable_fsdp_float8_all_gather = true\n"
                  "precompute_float8_dynamic_scale_for_fsdp = true\nrecipe_name = \"rowwise\"\n",
                  "float8.recipe_name is 'rowwise'");
    expectRefused("[model]\nflavor = \"8B\"\n[parallelism]\ncontext_parallel_degree = 2\n", "context_parallel_degree is 2");
    expectRefused("[model]\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degree = \"8\"\n",
                  "parallelism.tensor_parallel_degree must be an integer (line 4)");
    expectRefused("[model]\nflavor = \"8B\"\n", "data_parallel_shard_degree is -1", std::nullopt);
    expectRefused("[model]\nflavor = \"8B\"\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "
                  "\"ZBVZeroBubble\"\n",
                  "valid: 1F1B, GPipe, Interleaved1F1B");
    expectRefused("[model]\nflavor = \"8B\"\n[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "
                  "\"Interleaved1F1B\"\npipeline_parallel_layers_per_stage = 2\n",
                  "17 stages do not split over pipeline_parallel_degree 2");
    expectRefused("[model]\nflavor = \"8B\"\n[training]\nlocal_batch_size = 2\nglobal_batch_size = 100\n",
                  "training.global_batch_size is 100: not a multiple of local_batch_size 2 x 64");
    expectRefused("[model]\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"memory_budget\"\n",
                  "activation_checkpoint.mode is 'memory_budget'");
    expectRefused("[model]\nflavor = \"8B\"\n[optimizer]\nname = \"Muon\"\n", "optimizer.name is 'Muon'");
    expectRefused("[model]\nflavor = \"8B\"\n[training]\nmax_norm = 0.0\n", "training.max_norm is 0; valid: a positive number");
    expectRefused("[model]\nflavor = \"8B\"\n[optimizer]\nimplementation = \"for-loop\"\n",
                  "optimizer.implementation is 'for-loop'; valid: fused");
    expectRefused("[model]\nflavor = \"8B\"\n[training]\nmax_norm = \"1\"\n", "training.max_norm");
    expectRefused("[model]\nflavor = \"8B\"\n[checkpoint]\nenable = true\ninterval = 0\n", "checkpoint.interval is 0");
    ConfigContext context;
    auto ini = importConfigFile(kData + "no-such.ini", context);
    ASSERT_FALSE(ini.ok());
    EXPECT_NE(ini.error().message.find("unknown config format '.ini'"), std::string::npos) << ini.error().message;
    auto missing = importConfigFile(kData + "no-such.toml", context);
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("no-such.toml"), std::string::npos) << missing.error().message;
}

// accelerate's YAML: FSDP2 HSDP from parallelism_config, field by field (the model from the flags).
TEST(AccelerateYamlTest, Fsdp2HsdpFieldByField) {
    ConfigContext context;
    auto c = importConfigFile(kData + "accelerate-fsdp2-hsdp.yaml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->format, "accelerate YAML");
    EXPECT_FALSE(c->overrides.model.has_value());
    c->overrides.model = "llama-3.1-8b";
    const core::Plan plan = planOf(*c);
    EXPECT_EQ(plan.cluster.nodes, 2);
    EXPECT_EQ(plan.cluster.gpus_per_node, 8);
    EXPECT_EQ(plan.sharding.fsdp_version, 2);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::HybridShard);
    EXPECT_EQ(plan.sharding.shard_size, 8);
    EXPECT_EQ(plan.sharding.reshard_after_forward, core::ReshardMode::True);
    EXPECT_EQ(plan.sharding.wrap.kind, core::WrapKind::Block);
    // accelerate's bf16: MixedPrecisionPolicy(param_dtype = reduce_dtype = bf16).
    EXPECT_EQ(plan.training.param_dtype, core::DType::BF16);
    EXPECT_EQ(plan.training.reduce_dtype, core::DType::BF16);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::Full);
    EXPECT_EQ(plan.training.offload, core::Offload::None);
    EXPECT_EQ(plan.training.kernels, core::KernelImpl::Eager);
    for (const char* k : {"compute_environment", "rdzv_backend", "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
                          "fsdp_config.fsdp_cpu_ram_efficient_loading"}) {
        EXPECT_TRUE(contains(c->ignored, k)) << k;
    }
}

// FSDP1: the strategy by its number (2 = SHARD_GRAD_OP), size-based wrapping, FSDP1's prefetch
// options, CPU offload, no mixed precision, torch.compile through dynamo_config.
TEST(AccelerateYamlTest, Fsdp1ShardGradOpFieldByField) {
    ConfigContext context;
    auto c = importConfigFile(kData + "accelerate-fsdp1-shard-grad-op.yaml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    c->overrides.model = "llama-3.1-8b";
    const core::Plan plan = planOf(*c);
    EXPECT_EQ(plan.cluster.nodes, 1);
    EXPECT_EQ(plan.cluster.gpus_per_node, 8);
    EXPECT_EQ(plan.sharding.fsdp_version, 1);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::ShardGradOp);
    EXPECT_EQ(plan.sharding.wrap.kind, core::WrapKind::MinParams);
    EXPECT_EQ(plan.sharding.wrap.min_params, 200'000'000);
    EXPECT_EQ(plan.sharding.backward_prefetch, core::ShardingSpec::BackwardPrefetch::Post);
    EXPECT_TRUE(plan.sharding.forward_prefetch);
    EXPECT_EQ(plan.training.param_dtype, core::DType::F32);
    EXPECT_EQ(plan.training.reduce_dtype, core::DType::F32);
    EXPECT_EQ(plan.training.offload, core::Offload::Cpu);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::None);
    EXPECT_EQ(plan.training.kernels, core::KernelImpl::Compile);
}

void expectYamlRefused(const std::string& yaml, const std::string& named) {
    auto c = importAccelerateYaml(yaml, "acc.yaml");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_NE(c.error().message.find(named), std::string::npos) << c.error().message;
    EXPECT_EQ(c.error().message.rfind("acc.yaml: ", 0), 0u) << c.error().message;
}

// HF Trainer: a TrainingArguments JSON as HfArgumentParser reads it, its fsdp_config a file beside
// it with the "fsdp_"-prefixed keys the Trainer documentation shows (FSDP1: fsdp_version 1; the
// legacy "full_shard ... offload" options fill it); --model gives the model.
TEST(HfTrainerJsonTest, TrainingArgumentsFieldByField) {
    ConfigContext context;
    auto c = importConfigFile(kData + "hf-trainer-llama-fsdp.json", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->format, "HF TrainingArguments JSON");
    core::PlanOverrides o = c->overrides;
    EXPECT_FALSE(o.model.has_value());  // the script's: --model
    o.model = "llama-3.1-8b";
    const core::Plan plan = build(o);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::FullShard);
    EXPECT_EQ(plan.sharding.fsdp_version, 1);
    EXPECT_EQ(plan.sharding.wrap.kind, core::WrapKind::Block);
    EXPECT_EQ(plan.sharding.backward_prefetch, core::ShardingSpec::BackwardPrefetch::Post);
    EXPECT_TRUE(plan.sharding.forward_prefetch);
    EXPECT_EQ(plan.training.offload, core::Offload::Cpu);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::Full);
    EXPECT_EQ(plan.training.micro_batch, 2);
    EXPECT_EQ(plan.training.grad_accum, 8);
    EXPECT_EQ(plan.training.param_dtype, core::DType::BF16);
    EXPECT_EQ(plan.training.reduce_dtype, core::DType::BF16);
    EXPECT_EQ(plan.training.clip_grad_norm, 0.3);
    EXPECT_EQ(plan.training.optimizer, core::Optimizer::AdamW);
    for (const char* k : {"learning_rate", "output_dir", "save_steps", "tf32", "fsdp_config.use_orig_params",
                          "fsdp_config.cpu_ram_efficient_loading"}) {
        EXPECT_TRUE(contains(c->ignored, k)) << k;
    }
}

// transformers 5's defaults where a key is absent: FSDP2, every block wrapped, batch 8,
// max_grad_norm 1.0, fused AdamW; under FSDP1 no backward prefetch (NO_PREFETCH).
TEST(HfTrainerJsonTest, AbsentKeysTakeTheTrainersDefaults) {
    auto c = importHfTrainerJson(
        R"({"fsdp": ["shard_grad_op", "auto_wrap"], "fsdp_config": {"min_num_params": 1000000, "auto_wrap_policy": "SIZE_BASED_WRAP"}})",
        "t.json");
    ASSERT_TRUE(c.ok()) << c.error().message;
    core::PlanOverrides o = c->overrides;
    o.model = "gpt2";
    const core::Plan plan = build(o);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::ShardGradOp);
    EXPECT_EQ(plan.sharding.fsdp_version, 2);
    EXPECT_EQ(plan.sharding.wrap.kind, core::WrapKind::MinParams);
    EXPECT_EQ(plan.sharding.wrap.min_params, 1'000'000);
    EXPECT_EQ(plan.training.micro_batch, 8);
    EXPECT_EQ(plan.training.clip_grad_norm, 1.0);
    EXPECT_EQ(plan.training.optimizer, core::Optimizer::AdamWFused);
    EXPECT_EQ(plan.training.param_dtype, core::DType::F32);
    auto v2 = importHfTrainerJson(R"({"fsdp": true})", "t.json");
    ASSERT_TRUE(v2.ok()) << v2.error().message;
    EXPECT_EQ(*v2->overrides.fsdp, 2);
    EXPECT_EQ(*v2->overrides.strategy, "FULL_SHARD");  // reshard_after_forward true
    EXPECT_EQ(*v2->overrides.wrap, "block");           // TRANSFORMER_BASED_WRAP
    auto fsdp1 = importHfTrainerJson(R"({"fsdp": "full_shard", "fsdp_config": {"version": 1, "auto_wrap_policy": "NO_WRAP"}})", "t.json");
    ASSERT_TRUE(fsdp1.ok()) << fsdp1.error().message;
    EXPECT_EQ(*fsdp1->overrides.backward_prefetch, "none");  // FSDP_BACKWARD_PREFETCH=NO_PREFETCH
    EXPECT_EQ(*fsdp1->overrides.wrap, "whole");
    ConfigContext context;
    auto bare = importConfigFile(kData + "hf-fsdp-config.json", context);
    ASSERT_TRUE(bare.ok()) << bare.error().message;
    EXPECT_EQ(bare->format, "HF fsdp_config JSON");
    EXPECT_EQ(*bare->overrides.strategy, "FULL_SHARD");  // FSDP1's reshard_after_forward default full_shard
    EXPECT_EQ(*bare->overrides.wrap, "block");
    EXPECT_EQ(*bare->overrides.ac, "full");
}

TEST(HfTrainerJsonTest, RefusalsNameTheKeyAndWhatIsValid) {
    auto refused = [](const std::string& text, const std::string& named) {
        auto c = importHfTrainerJson(text, "args.json");
        ASSERT_FALSE(c.ok()) << text;
        EXPECT_EQ(c.error().message.rfind("args.json: ", 0), 0u) << c.error().message;
        EXPECT_NE(c.error().message.find(named), std::string::npos) << c.error().message;
    };
    refused("{\"fsdp\": ", "malformed JSON");
    refused("[1, 2]", "not an HF Trainer config");
    refused(R"({"fsdp": "full_shard", "per_device_batch": 2})", "per_device_batch is not a TrainingArguments field");
    refused(R"({"fsdp": "full_shard", "fsdp_config": {"fsdp_sharding_strategy": 1}})", "unknown key fsdp_config.fsdp_sharding_strategy");
    refused(R"({"fsdp": "full_shard auto_wrap turbo"})", "has the option 'turbo'; valid: full_shard");
    refused(R"({"fsdp": "full_shard shard_grad_op"})", "names more than one sharding strategy");
    refused(R"({"fsdp": ""})", "fsdp is not set");
    refused(R"({"fsdp": "hybrid_shard"})", "only with FSDP1 (fsdp_config.version 1)");
    refused(R"({"fsdp": "full_shard", "bf16": true, "fp16": true})", "bf16 and fp16 are both true");
    refused(R"({"fsdp": "full_shard", "per_device_train_batch_size": 0})", "per_device_train_batch_size is 0; valid: an integer");
    refused(R"({"fsdp": "full_shard", "max_grad_norm": -1})", "max_grad_norm is -1");
    refused(R"({"fsdp": "full_shard", "optim": "adafactor"})", "optim is 'adafactor'; modelled: adamw_torch");
    refused(R"({"fsdp": true, "fsdp_config": {"auto_wrap_policy": "EVERY_LAYER"}})", "auto_wrap_policy is 'EVERY_LAYER'");
    refused(R"({"fsdp": true, "fsdp_config": {"reshard_after_forward": "full_shard"}})", "reshard_after_forward is \"full_shard\"");
    refused(R"({"fsdp": "full_shard", "fsdp_config": {"version": 3}})", "fsdp_config.version is 3; valid: an integer from 1 to 2");
    refused(R"({"fsdp": "full_shard", "fsdp_config": {"version": 1, "backward_prefetch": "sideways"}})", "backward_prefetch is 'sideways'");
    refused(R"({"fsdp": "full_shard", "fsdp_config": {"xla": true}})", "XLA");
    refused(R"({"fsdp": "full_shard", "deepspeed": "ds.json"})", "deepspeed is given");
    refused(R"({"fsdp": "full_shard", "fsdp_config": "no-such-file.json"})", "no-such-file.json");
}

// Lightning: a LightningCLI config whose trainer.strategy is FSDPStrategy; --model and the batch
// (the LightningModule's and the DataModule's) come from the flags.
TEST(LightningYamlTest, FsdpStrategyFieldByField) {
    ConfigContext context;
    auto c = importConfigFile(kData + "lightning-fsdp.yaml", context);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->format, "Lightning CLI YAML");
    core::PlanOverrides o = c->overrides;
    o.model = "llama-3.1-8b";
    const core::Plan plan = build(o);
    EXPECT_EQ(plan.cluster.nodes, 2);
    EXPECT_EQ(plan.cluster.gpus_per_node, 8);
    EXPECT_EQ(plan.sharding.fsdp_version, 1);
    EXPECT_EQ(plan.sharding.strategy, core::Strategy::HybridShard);
    EXPECT_EQ(plan.sharding.shard_size, 8);  // FSDP1's hybrid default: a node
    EXPECT_EQ(plan.sharding.wrap.kind, core::WrapKind::Block);
    EXPECT_EQ(plan.sharding.backward_prefetch, core::ShardingSpec::BackwardPrefetch::Pre);
    EXPECT_EQ(plan.training.ac, core::Checkpointing::Full);
    EXPECT_EQ(plan.training.param_dtype, core::DType::BF16);
    EXPECT_EQ(plan.training.reduce_dtype, core::DType::BF16);  // FSDPPrecision: all three dtypes bf16
    EXPECT_EQ(plan.training.grad_accum, 4);
    EXPECT_EQ(plan.training.clip_grad_norm, 1.0);
    for (const char* k : {"seed_everything", "model", "data", "trainer.max_steps", "trainer.log_every_n_steps",
                          "trainer.strategy.init_args.use_orig_params"}) {
        EXPECT_TRUE(contains(c->ignored, k)) << k;
    }
    // The "fsdp" alias: FSDPStrategy's defaults (FULL_SHARD, no wrapping, fp32, no clipping).
    auto alias = importLightningYaml("trainer:\n  strategy: fsdp\n  devices: 4\n", "t.yaml");
    ASSERT_TRUE(alias.ok()) << alias.error().message;
    EXPECT_EQ(*alias->overrides.strategy, "FULL_SHARD");
    EXPECT_EQ(*alias->overrides.wrap, "whole");
    EXPECT_EQ(*alias->overrides.param_dtype, "fp32");
    EXPECT_EQ(*alias->overrides.clip_grad_norm, 0.0);
}

TEST(LightningYamlTest, RefusalsNameTheKeyAndWhatIsValid) {
    auto refused = [](const std::string& text, const std::string& named) {
        auto c = importLightningYaml(text, "cli.yaml");
        ASSERT_FALSE(c.ok()) << text;
        EXPECT_EQ(c.error().message.rfind("cli.yaml: ", 0), 0u) << c.error().message;
        EXPECT_NE(c.error().message.find(named), std::string::npos) << c.error().message;
    };
    refused("trainer: [1\n", "malformed YAML");
    refused("trainer:\n  strategy: ddp\n", "trainer.strategy is 'ddp'");
    refused("trainer:\n  strategy: fsdp\n  devcies: 8\n", "trainer.devcies is not a Trainer argument");
    refused("trainer:\n  strategy:\n    class_path: DeepSpeedStrategy\n", "class_path is 'DeepSpeedStrategy'");
    refused("trainer:\n  strategy:\n    class_path: FSDPStrategy\n    init_args:\n      sharding: FULL\n",
            "init_args.sharding is not an FSDPStrategy argument");
    refused("trainer:\n  strategy:\n    class_path: FSDPStrategy\n    init_args:\n      sharding_strategy: ZERO3\n",
            "sharding_strategy is 'ZERO3'");
    refused("trainer:\n  strategy: fsdp\n  precision: transformer-engine\n", "trainer.precision is 'transformer-engine'");
    refused("trainer:\n  strategy: fsdp\n  gradient_clip_val: 1.0\n  gradient_clip_algorithm: value\n", "modelled: norm");
    refused("trainer:\n  strategy: fsdp\n  accelerator: cpu\n", "trainer.accelerator is 'cpu'");
    refused("trainer:\n  strategy: fsdp\n  devices: many\n", "trainer.devices is 'many'; valid: an integer");
    refused("trainer:\n  strategy: fsdp\nfit: {}\n", "fit is not a LightningCLI key");
}

TEST(AccelerateYamlTest, RefusalsNameTheKeyAndWhatIsValid) {
    const std::string base = "distributed_type: FSDP\nnum_processes: 8\n";
    expectYamlRefused("distributed_type: [FSDP\n", "malformed YAML at line");
    expectYamlRefused(base + "fsdp_config:\n  fsdp_sharding_strateg: FULL_SHARD\n",
                      "unknown key fsdp_config.fsdp_sharding_strateg; keys shardcast knows:");
    expectYamlRefused(base + "deepspeed_config: {}\n", "deepspeed_config is given");
    expectYamlRefused("distributed_type: MULTI_GPU\nnum_processes: 8\n", "distributed_type is 'MULTI_GPU'");
    expectYamlRefused(base + "mixed_precision: fp8\n", "mixed_precision is 'fp8'; valid: no, bf16, fp16");
    expectYamlRefused(base + "fsdp_config:\n  fsdp_version: 3\n", "fsdp_config.fsdp_version is 3; valid: 1, 2");
    expectYamlRefused(base + "fsdp_config:\n  fsdp_sharding_strategy: 7\n", "valid: FULL_SHARD, SHARD_GRAD_OP");
    expectYamlRefused(base + "fsdp_config:\n  fsdp_offload_params: maybe\n",
                      "fsdp_config.fsdp_offload_params must be true or false (got 'maybe')");
    expectYamlRefused(base + "fsdp_config:\n  fsdp_auto_wrap_policy: LAMBDA\n", "valid: TRANSFORMER_BASED_WRAP");
    expectYamlRefused(base + "parallelism_config:\n  parallelism_config_tp_size: 2\n", "parallelism_config_tp_size must be 1");
    expectYamlRefused("distributed_type: FSDP\nnum_machines: 3\nnum_processes: 8\n", "num_processes must be the GPUs of all 3");
    expectYamlRefused(base + "fsdp_config:\n  fsdp_limit_all_gathers: false\n", "fsdp_limit_all_gathers is false");
    expectYamlRefused("- a\n- b\n", "not an accelerate config");
}

}  // namespace
}  // namespace shardcast::configs
