#include "simulator/pytorch_code.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/model/model_lora.hpp"
#include "core/plan/wrap.hpp"

namespace shardcast::sim {
namespace {

bool allDigits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
}

std::string torchDtype(core::DType t) {
    switch (t) {
        case core::DType::F32: return "torch.float32";
        case core::DType::BF16: return "torch.bfloat16";
        case core::DType::F16: return "torch.float16";
        case core::DType::F8: return "torch.float8_e4m3fn";
        case core::DType::I64: return "torch.int64";
        case core::DType::U8: return "torch.uint8";
    }
    return "None";
}

// FSDP2's reshard_after_forward: bool, or an int (re-shard to that many ranks).
std::string reshardArg(const core::ShardingSpec& s) {
    if (s.reshard_after_forward == core::ReshardMode::Count) return std::to_string(s.reshard_after_forward_k);
    return core::reshardsAfterForward(s) ? "True" : "False";
}

// "model.layers.4" ... "model.layers.13" -> list(model.model.layers[4:14]); empty if the
// modules are not consecutive entries of one ModuleList.
std::string sliceExpr(const std::vector<std::string>& unit) {
    const std::string_view front = unit.front();
    const size_t dot = front.rfind('.');
    if (dot == std::string_view::npos) return {};
    const std::string_view parent = front.substr(0, dot + 1);  // with the trailing dot
    long expected = -1;
    for (const std::string& fqn : unit) {
        const std::string_view name = fqn;
        if (name.substr(0, parent.size()) != parent) return {};
        const std::string_view idx = name.substr(parent.size());
        if (!allDigits(idx)) return {};
        const long value = std::stol(std::string(idx));
        if (expected >= 0 && value != expected) return {};
        expected = value + 1;
    }
    const long lo = expected - static_cast<long>(unit.size());
    return fmt::format("list({}[{}:{}])", pythonModuleExpr(parent.substr(0, parent.size() - 1)), lo, expected);
}

// The mode of each block (forward order) when the plan checkpoints blocks with checkpoint_wrapper
// (full, layer:K, op, blocks:...); empty otherwise.
std::vector<core::Checkpointing> blockModes(const core::Plan& plan) {
    const core::TrainingSpec& tr = plan.training;
    using core::Checkpointing;
    if (tr.ac == Checkpointing::None || tr.ac == Checkpointing::AttnCore || !plan.model) return {};
    std::vector<Checkpointing> modes;
    for (size_t i = 0; i < plan.model->blocks.size(); ++i) {
        modes.push_back(core::blockCheckpointing(tr, static_cast<int64_t>(i)));
    }
    return modes;
}

// The imports (and torchtitan's per-op SAC policy when a block runs under it) checkpointCode's
// wrappers use.
std::string checkpointPreamble(const core::Plan& plan, bool any_op) {
    std::string s = "# Activation checkpointing (" + core::acString(core::acSpecOf(plan.training)) + "), before fully_shard\n";
    s += "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n";
    if (any_op) {
        s += "from collections import defaultdict\n"
             "from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts\n"
             "_save_list = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,\n"
             "              torch.ops.aten._scaled_dot_product_flash_attention.default}\n"
             "def _op_sac_context():\n"
             "    meta = defaultdict(int)\n"
             "    def policy(ctx, func, *args, **kwargs):\n"
             "        key = \"recompute_mm_count\" if ctx.is_recompute else \"forward_mm_count\"\n"
             "        if func == torch.ops.aten.mm.default:\n"
             "            meta[key] += 1\n"
             "        keep = func in _save_list and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)\n"
             "        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE\n"
             "    return create_selective_checkpoint_contexts(policy)\n";
    }
    return s;
}

// checkpoint_wrapper on each block in its mode, applied before fully_shard (as torchtitan's
// apply_ac): full wraps the block, op adds torchtitan's per-op SAC policy
// (torchtitan/models/llama3/infra/parallelize.py, _apply_ac_to_transformer_block: save the outputs
// of the ops in _save_list, except every second aten.mm). Runs of consecutive ModuleList entries
// are written as one loop.
std::string checkpointCode(const core::Plan& plan) {
    const std::vector<core::Checkpointing> modes = blockModes(plan);
    bool any_op = false, any = false;
    for (core::Checkpointing m : modes) {
        any_op = any_op || m == core::Checkpointing::Op;
        any = any || m != core::Checkpointing::None;
    }
    if (!any) return {};
    std::string s = checkpointPreamble(plan, any_op);
    auto wrapCall = [](core::Checkpointing m, const std::string& expr) {
        return m == core::Checkpointing::Op
                   ? fmt::format("checkpoint_wrapper({}, context_fn=_op_sac_context, preserve_rng_state=False)", expr)
                   : fmt::format("checkpoint_wrapper({}, preserve_rng_state=False)", expr);
    };
    const core::Model& model = *plan.model;
    size_t i = 0;
    while (i < modes.size()) {
        const core::Checkpointing m = modes[i];
        const std::string& name = model.modules[static_cast<size_t>(model.blocks[i])].name;
        const size_t dot = name.rfind('.');
        const std::string parent = dot == std::string::npos ? std::string() : name.substr(0, dot);
        const std::string idx = dot == std::string::npos ? std::string() : name.substr(dot + 1);
        // The run of blocks in mode m that are consecutive entries parent.K, parent.K+1, ...
        size_t j = i + 1;
        if (allDigits(idx)) {
            const long first = std::stol(idx);
            while (j < modes.size() && modes[j] == m &&
                   model.modules[static_cast<size_t>(model.blocks[j])].name ==
                       fmt::format("{}.{}", parent, first + static_cast<long>(j - i))) {
                ++j;
            }
            if (m != core::Checkpointing::None) {
                const std::string list = pythonModuleExpr(parent);
                if (j - i == 1) {
                    s += fmt::format("{}[{}] = {}\n", list, first, wrapCall(m, fmt::format("{}[{}]", list, first)));
                } else {
                    s += fmt::format("for i in range({}, {}):\n    {}[i] = {}\n", first, first + static_cast<long>(j - i), list,
                                     wrapCall(m, list + "[i]"));
                }
            }
        } else if (m != core::Checkpointing::None) {
            const std::string expr = pythonModuleExpr(name);
            s += fmt::format("{} = {}\n", expr, wrapCall(m, expr));
        }
        i = j;
    }
    return s;
}

}  // namespace

std::string pythonModuleExpr(std::string_view fqn, std::string_view root) {
    std::string out(root);
    size_t start = 0;
    while (start < fqn.size()) {
        size_t dot = fqn.find('.', start);
        if (dot == std::string_view::npos) dot = fqn.size();
        const std::string_view part = fqn.substr(start, dot - start);
        out += allDigits(part) ? fmt::format("[{}]", part) : fmt::format(".{}", part);
        start = dot + 1;
    }
    return out;
}

std::vector<std::vector<std::string>> unitsOfPlan(const core::Plan& plan) {
    core::UnitAssignment ua;
    std::vector<std::vector<std::string>> units;
    if (!core::resolveUnits(*plan.model, plan.sharding.wrap, ua)) return units;
    for (size_t u = 1; u < ua.units.size(); ++u) {
        std::vector<std::string> mods;
        for (int32_t m : ua.units[u].modules) mods.push_back(plan.model->modules[static_cast<size_t>(m)].name);
        units.push_back(std::move(mods));
    }
    return units;
}

std::vector<std::vector<std::string>> unitsOfPolicy(const core::WrapPolicy& wrap) {
    std::vector<std::vector<std::string>> units;
    for (const std::string& entry : wrap.modules) {
        std::vector<std::string> mods;
        for (const std::string_view fqn : core::splitUnitEntry(entry)) mods.emplace_back(fqn);
        units.push_back(std::move(mods));
    }
    return units;
}

// GPT-2's TP plan (Megatron-LM's layout, core/model/model_io.cpp applyGpt2TpPlan) on HuggingFace's
// GPT2LMHeadModel: each Conv1D becomes the nn.Linear the parallel styles take, c_attn's output
// columns reordered so that tp rank i's slice is [q_i, k_i, v_i]; the tied embedding and LM head
// both shard the vocabulary rows and are tied again after parallelize_module. `embed` and `head`
// are the styles of the token embedding and the LM head (as for Llama).
std::string gpt2TensorParallelCode(const core::ShardingSpec& sh, const core::Mesh& mesh, const std::string& embed,
                                   const std::string& head) {
    const bool sp = sh.sequence_parallel;
    const std::string seq = sp ? "Shard(1)" : "Replicate()";
    std::string s;
    s += fmt::format("tp = {}\n", mesh.tp);
    s += "def _as_linear(conv, qkv=False):  # transformers' Conv1D (x @ W + b, W [in, out]) as nn.Linear holding W^T\n";
    s += "    nx, nf = conv.weight.shape\n";
    s += "    w, b = conv.weight.detach().t(), conv.bias.detach()\n";
    s += "    if qkv:  # Megatron-LM's order: rank i's columns are [q_i, k_i, v_i]\n";
    s += "        w = w.reshape(3, tp, nf // (3 * tp), nx).transpose(0, 1).reshape(nf, nx)\n";
    s += "        b = b.reshape(3, tp, nf // (3 * tp)).transpose(0, 1).reshape(nf)\n";
    s += "    lin = torch.nn.Linear(nx, nf, device=conv.weight.device, dtype=conv.weight.dtype)\n";
    s += "    with torch.no_grad():\n";
    s += "        lin.weight.copy_(w)\n";
    s += "        lin.bias.copy_(b)\n";
    s += "    return lin\n";
    s += "for block in model.transformer.h:\n";
    s += "    block.attn.c_attn = _as_linear(block.attn.c_attn, qkv=True)\n";
    s += "    block.attn.c_proj = _as_linear(block.attn.c_proj)\n";
    s += "    block.mlp.c_fc = _as_linear(block.mlp.c_fc)\n";
    s += "    block.mlp.c_proj = _as_linear(block.mlp.c_proj)\n";
    s += fmt::format("parallelize_module(model, tp_mesh, {{\n"
                     "    \"transformer.wte\": {0},\n"
                     "    \"transformer.wpe\": {0},\n"
                     "{1}"
                     "    \"lm_head\": {2},\n"
                     "}})\n",
                     embed, sp ? "    \"transformer.ln_f\": SequenceParallel(),\n" : "", head);
    s += "model.lm_head.weight = model.transformer.wte.weight  # tied again: both shard the vocabulary rows\n";
    s += "for block in model.transformer.h:\n";
    s += "    plan = {\n";
    if (sp) {
        s += "        \"ln_1\": SequenceParallel(), \"ln_2\": SequenceParallel(),\n";
        s += "        \"attn\": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),\n";
        s += "        \"mlp\": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),\n";
    }
    s += fmt::format("        \"attn.c_attn\": ColwiseParallel(), \"attn.c_proj\": RowwiseParallel(output_layouts={}),\n", seq);
    s += fmt::format("        \"mlp.c_fc\": ColwiseParallel(), \"mlp.c_proj\": RowwiseParallel(output_layouts={}),\n", seq);
    s += "    }\n";
    s += "    parallelize_module(block, tp_mesh, plan)\n";
    if (sp) s += "    block.register_forward_pre_hook(_local_shard, with_kwargs=True)\n";
    s += "    for attr in (\"split_size\", \"num_heads\", \"embed_dim\"):  # each rank: heads / tp\n";
    s += "        setattr(block.attn, attr, getattr(block.attn, attr) // tp)\n";
    if (sh.loss_parallel) {
        s += "# loss_parallel: run the forward (HF computes the loss) and backward inside\n";
        s += "# `with torch.distributed.tensor.parallel.loss_parallel():`\n";
    }
    return s;
}

// The device mesh (dp_replicate, dp_shard, tp) and torchtitan's Llama TP plan on HuggingFace's
// module names (torchtitan/models/llama3/infra/parallelize.py, apply_tp); `mesh` is then the dp
// part that fully_shard shards over.
// `pipeline`: the mesh `world` (with its pp dimension) is already built and the model is this
// stage's slice, which holds the embedding on the first stage only (is_first) and the norm and
// output on the last only (is_last).
std::string tensorParallelCode(const core::Plan& plan, const core::Mesh& mesh, bool pipeline) {
    const core::ShardingSpec& sh = plan.sharding;
    std::string s;
    s += "from torch.distributed.tensor import DTensor, Replicate, Shard\n";
    s += "from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,\n";
    s += "                                               SequenceParallel, parallelize_module)\n";
    if (!pipeline) {
        s += fmt::format(
            "world = init_device_mesh(\"cuda\", ({}, {}, {}), mesh_dim_names=(\"dp_replicate\", \"dp_shard\", \"tp\"))\n",
            mesh.replicate_size, mesh.shard_size, mesh.tp);
    }
    s += "tp_mesh = world[\"tp\"]\n";
    const bool sp = sh.sequence_parallel;
    const std::string seq = sp ? "Shard(1)" : "Replicate()";
    const std::string embed = fmt::format(
        "RowwiseParallel(input_layouts=Replicate(), output_layouts={}, use_local_output={})", seq, sp ? "False" : "True");
    const std::string head =
        fmt::format("ColwiseParallel(input_layouts={}, output_layouts={}, use_local_output={})", seq,
                    sh.loss_parallel ? "Shard(-1)" : "Replicate()", sh.loss_parallel ? "False" : "True");
    if (sp) {
        // HuggingFace's LlamaModel reads the sequence length off the embedding output (mask, positions,
        // rotary), GPT2Model too (mask, positions): it stays a DTensor there, and each block takes its
        // local sequence shard, as torchtitan passes activations between blocks.
        s += "def _local_shard(mod, args, kwargs):  # the embedding's Shard(1) DTensor -> this rank's shard\n";
        s += "    if args and isinstance(args[0], DTensor):\n";
        s += "        args = (args[0].to_local(),) + tuple(args[1:])\n";
        s += "    if isinstance(kwargs.get(\"hidden_states\"), DTensor):\n";
        s += "        kwargs = dict(kwargs, hidden_states=kwargs[\"hidden_states\"].to_local())\n";
        s += "    return args, kwargs\n";
    }
    if (plan.model->tp_plan == "megatron-gpt2") {
        s += gpt2TensorParallelCode(sh, mesh, embed, head);
        s += mesh.replicate_size > 1 ? "mesh = world[\"dp_replicate\", \"dp_shard\"]\n" : "mesh = world[\"dp_shard\"]\n";
        return s;
    }
    if (pipeline) {
        s += "top = {}\n";
        s += fmt::format("if is_first:\n    top[\"model.embed_tokens\"] = {}\n", embed);
        s += "if is_last:\n";
        if (sp) s += "    top[\"model.norm\"] = SequenceParallel()\n";
        s += fmt::format("    top[\"lm_head\"] = {}\n", head);
        s += "if top:\n    parallelize_module(model, tp_mesh, top)\n";
    } else {
        s += fmt::format("parallelize_module(model, tp_mesh, {{\n"
                         "    \"model.embed_tokens\": {},\n"
                         "{}"
                         "    \"lm_head\": {},\n"
                         "}})\n",
                         embed, sp ? "    \"model.norm\": SequenceParallel(),\n" : "", head);
    }
    s += "for block in model.model.layers:\n";
    s += "    plan = {\n";
    // Rule F8-TP: with Float8 linears and sequence parallelism, torchao's float8 styles (the input
    // cast once on its shard and all-gathered in fp8), as torchtitan's apply_tp uses them.
    const bool float8_tp = sp && plan.training.all_gather_dtype == core::AllGatherDtype::Fp8;
    const char* colwise = float8_tp ? "Float8ColwiseParallel" : "ColwiseParallel";
    const char* rowwise = float8_tp ? "Float8RowwiseParallel" : "RowwiseParallel";
    const char* prepare = float8_tp ? "PrepareFloat8ModuleInput" : "PrepareModuleInput";
    if (float8_tp) {
        s.insert(0, "from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,\n"
                    "                                                  PrepareFloat8ModuleInput)\n");
    }
    if (sp) {
        s += "        \"input_layernorm\": SequenceParallel(),\n";
        s += "        \"post_attention_layernorm\": SequenceParallel(),\n";
        s += fmt::format("        \"self_attn\": {}(input_kwarg_layouts={{\"hidden_states\": Shard(1)}},\n", prepare);
        s += "            desired_input_kwarg_layouts={\"hidden_states\": Replicate()}),\n";
        s += fmt::format("        \"mlp\": {}(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),\n", prepare);
    }
    s += fmt::format("        \"self_attn.q_proj\": {0}(), \"self_attn.k_proj\": {0}(),\n", colwise);
    s += fmt::format("        \"self_attn.v_proj\": {}(),\n", colwise);
    s += fmt::format("        \"self_attn.o_proj\": {}(output_layouts={}),\n", rowwise, seq);
    s += fmt::format("        \"mlp.gate_proj\": {0}(), \"mlp.up_proj\": {0}(),\n", colwise);
    s += fmt::format("        \"mlp.down_proj\": {}(output_layouts={}),\n", rowwise, seq);
    s += "    }\n";
    s += "    parallelize_module(block, tp_mesh, plan)\n";
    if (sp) s += "    block.register_forward_pre_hook(_local_shard, with_kwargs=True)\n";
    s += "    for attr in (\"num_heads\", \"num_key_value_heads\", \"num_attention_heads\"):  # each rank: heads / tp\n";
    s += fmt::format("        if isinstance(getattr(block.self_attn, attr, None), int):\n"
                     "            setattr(block.self_attn, attr, getattr(block.self_attn, attr) // {})\n",
                     mesh.tp);
    if (sh.loss_parallel) {
        s += "# loss_parallel: run the forward (HF computes the loss) and backward inside\n";
        s += "# `with torch.distributed.tensor.parallel.loss_parallel():`\n";
    }
    s += mesh.replicate_size > 1 ? "mesh = world[\"dp_replicate\", \"dp_shard\"]\n" : "mesh = world[\"dp_shard\"]\n";
    return s;
}

namespace {

// Pipeline parallelism (torch.distributed.pipelining as torchtitan applies it): the 4-D mesh, this
// rank's stage cut out of the HuggingFace model (the other stages' blocks dropped, the embedding
// kept on the first stage, the norm and output on the last), checkpoint_wrapper and torchtitan's
// TP plan on what is left, fully_shard of the plan's units that lie in the stage, then the
// PipelineStage and its schedule over the step's micro-batches.

// LoRA as the plan has it: PEFT puts the adapters into `model` in place (the module paths below
// stay valid) and freezes every other parameter. target_modules: the adapted modules' names when
// every linear of that name is adapted, else their full names.
std::string loraCode(const core::Plan& plan) {
    const core::LoraSpec& lora = plan.training.lora;
    if (!lora.enabled()) return "";
    const core::LoraSummary summary = core::loraSummary(*plan.model);
    const std::vector<std::string>& targets = summary.names_ambiguous ? summary.adapted : summary.names;
    std::string list;
    for (size_t i = 0; i < targets.size(); ++i) list += fmt::format("{}\"{}\"", i ? ", " : "", targets[i]);
    return fmt::format(
        "# LoRA, rank {} on {} linear modules; lora_alpha (the scaling) changes no memory or time.\n"
        "# The optimizer then takes the trainable parameters: [p for p in model.parameters() if p.requires_grad]\n"
        "from peft import LoraConfig, get_peft_model\n"
        "peft_model = get_peft_model(model, LoraConfig(r={}, lora_alpha={}, lora_dropout=0.0, target_modules=[{}]))\n",
        lora.rank, summary.modules, lora.rank, 2 * lora.rank, list);
}

// torchao float8 training with FSDP2's float8 all-gather and precomputed scales, on the layers
// core::float8Weights names (torchtitan's Float8LinearConverter filter).
std::string float8Code(const core::Plan& plan) {
    if (plan.training.all_gather_dtype != core::AllGatherDtype::Fp8) return "";
    return "# Float8 training (torchao, tensorwise scaling) with FSDP2's float8 all-gather, as torchtitan's\n"
           "# [float8] enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp set it.\n"
           "from torchao.float8 import Float8LinearConfig, convert_to_float8_training, "
           "precompute_float8_dynamic_scale_for_fsdp\n"
           "convert_to_float8_training(\n"
           "    model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),\n"
           "    module_filter_fn=lambda mod, fqn: fqn != \"lm_head\" and mod.in_features % 16 == 0 and mod.out_features % 16 == 0)\n"
           "# Each step, after optimizer.step(): precompute_float8_dynamic_scale_for_fsdp(model)\n";
}

// The gradient clipping the plan times, in each step between backward and the optimizer step.
std::string clipCode(const core::TrainingSpec& tr) {
    if (tr.clip_grad_norm <= 0) return "";
    return fmt::format("# Each step, after backward and before optimizer.step():\n"
                       "#   torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm={:g}, foreach=True)\n",
                       tr.clip_grad_norm);
}
std::string pipelineCode(const core::Plan& plan, const core::Mesh& mesh, const std::vector<std::vector<std::string>>& units) {
    const core::TrainingSpec& tr = plan.training;
    const core::ShardingSpec& sh = plan.sharding;
    std::string s;
    s += fmt::format("# shardcast: {} inside {} pipeline stages ({}, {} micro-batches) on {} x {} ({} GPUs)\n",
                     core::strategyName(sh.strategy), mesh.stages(), core::ppScheduleName(sh.pp_schedule), tr.grad_accum,
                     plan.cluster.nodes, plan.cluster.gpu.name, mesh.world_size);
    s += "import torch\n";
    s += "import torch.nn as nn\n";
    s += "from torch.distributed.device_mesh import init_device_mesh\n";
    s += "from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy\n";
    const char* schedule = sh.pp_schedule == core::PpSchedule::GPipe      ? "ScheduleGPipe"
                           : sh.pp_schedule == core::PpSchedule::OneFOneB ? "Schedule1F1B"
                                                                          : "ScheduleInterleaved1F1B";
    if (mesh.virtual_stages > 1) s += "import copy\n";
    s += fmt::format("from torch.distributed.pipelining import PipelineStage, {}\n\n", schedule);
    s += fmt::format("world = init_device_mesh(\"cuda\", ({}, {}, {}, {}), mesh_dim_names=(\"pp\", \"dp_replicate\", \"dp_shard\", "
                     "\"tp\"))\n",
                     mesh.pp, mesh.replicate_size, mesh.shard_size, mesh.tp);
    s += "device = torch.device(\"cuda\", torch.cuda.current_device())\n";
    std::string blocks;
    for (size_t i = 0; i < mesh.stage_blocks.size(); ++i) blocks += (i ? ", " : "") + std::to_string(mesh.stage_blocks[i]);
    s += fmt::format("stage_blocks = [{}]  # blocks per stage{}\n", blocks,
                     sh.pp_stage_blocks.empty() ? " (torchtitan's split: the embedding and the output count as one each)" : "");
    s += "pp_rank = world[\"pp\"].get_local_rank()\n";
    // Interleaved1F1B: the rank builds each of its stages from its own copy of the model (as
    // torchtitan's pipeline_module_split deep-copies the whole model per stage); one stage per rank
    // is built in place.
    const bool interleaved = mesh.virtual_stages > 1;
    const std::string idx = interleaved ? "stage_index" : "pp_rank";
    std::string b;  // the stage's construction, at top level or inside build_stage()
    b += fmt::format("first_block = sum(stage_blocks[:{}])\n", idx);
    b += fmt::format("end_block = first_block + stage_blocks[{}]\n", idx);
    b += fmt::format("is_first, is_last = {0} == 0, {0} == len(stage_blocks) - 1\n", idx);
    b += "# This rank's stage: the other stages' blocks dropped, as torchtitan's pipeline split does.\n";
    b += "model.model.layers = nn.ModuleList(list(model.model.layers)[first_block:end_block])\n";
    b += "if not is_first:\n    model.model.embed_tokens = None  # the stage reads the previous stage's activations\n";
    b += "if not is_last:\n    model.model.norm = nn.Identity()\n    model.lm_head = nn.Identity()  # its output: the residual stream\n";
    b += loraCode(plan);
    b += float8Code(plan);
    // torchtitan's order: tensor parallelism, then activation checkpointing, then fully_shard.
    if (mesh.tp > 1) {
        b += tensorParallelCode(plan, mesh, true);
    } else {
        b += mesh.replicate_size > 1 ? "mesh = world[\"dp_replicate\", \"dp_shard\"]\n" : "mesh = world[\"dp_shard\"]\n";
    }
    // Activation checkpointing, per global block (the plan's modes).
    const std::vector<core::Checkpointing> modes = blockModes(plan);
    bool any = false, any_op = false;
    for (core::Checkpointing m : modes) {
        any = any || m != core::Checkpointing::None;
        any_op = any_op || m == core::Checkpointing::Op;
    }
    if (any) {
        b += checkpointPreamble(plan, any_op);
        std::string list;
        for (size_t i = 0; i < modes.size(); ++i) {
            const char* m = modes[i] == core::Checkpointing::Op ? "\"op\"" : modes[i] == core::Checkpointing::None ? "None" : "\"full\"";
            list += (i ? ", " : "") + std::string(m);
        }
        b += fmt::format("_ac = [{}]  # per block of the model\n", list);
        b += "for i, block in enumerate(model.model.layers):\n";
        b += "    mode = _ac[first_block + i]\n";
        b += "    if mode == \"op\":\n";
        b += "        model.model.layers[i] = checkpoint_wrapper(block, context_fn=_op_sac_context, preserve_rng_state=False)\n";
        b += "    elif mode == \"full\":\n";
        b += "        model.model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=False)\n";
    }
    const std::string param = tr.param_dtype ? torchDtype(*tr.param_dtype) : "None";
    const std::string reduce = tr.reduce_dtype ? torchDtype(*tr.reduce_dtype) : "None";
    b += fmt::format("mp = MixedPrecisionPolicy(param_dtype={}, reduce_dtype={})\n", param, reduce);
    // The plan's units, by their names in the whole model; each stage shards the ones it holds.
    b += "units = [\n";
    for (const auto& unit : units) {
        std::string names;
        for (size_t i = 0; i < unit.size(); ++i) names += (i ? ", " : "") + fmt::format("\"{}\"", unit[i]);
        b += "    [" + names + "],\n";
    }
    b += "]\n";
    b += "def _in_stage(fqn):  # a module of the whole model as this stage holds it, or None\n";
    b += "    parts = fqn.split(\".\")\n";
    b += "    if fqn.startswith(\"model.layers.\") and parts[2].isdigit():\n";
    b += "        i = int(parts[2]) - first_block\n";
    b += "        if not 0 <= i < len(model.model.layers):\n            return None\n";
    b += "        mod = model.model.layers[i]\n";
    b += "        return mod.get_submodule(\".\".join(parts[3:])) if len(parts) > 3 else mod\n";
    b += "    try:\n        mod = model.get_submodule(fqn)\n    except AttributeError:\n        return None\n";
    b += "    return mod if any(True for _ in mod.parameters()) else None\n";
    b += "for unit in units:\n";
    b += "    mods = [m for m in map(_in_stage, unit) if m is not None]\n";
    b += "    if mods:\n";
    b += fmt::format("        fully_shard(mods[0] if len(mods) == 1 else mods, mesh=mesh, mp_policy=mp, reshard_after_forward={})\n",
                     reshardArg(sh));
    b += "\nclass _Stage(nn.Module):  # what PipelineStage calls: one tensor in, one out\n";
    b += "    def __init__(self, model):\n        super().__init__()\n        self.model = model\n\n";
    b += "    def forward(self, x):\n";
    b += "        if is_first:\n            return self.model(input_ids=x, use_cache=False).logits\n";
    if (mesh.tp > 1 && sh.sequence_parallel) {
        b += "        # The received local sequence shard, as the DTensor HuggingFace reads the sequence length off.\n";
        b += "        x = DTensor.from_local(x, tp_mesh, [Shard(1)])\n";
    }
    b += "        return self.model(inputs_embeds=x, use_cache=False).logits\n\n";
    b += "# The stage is the FSDP root, so that PipelineStage runs its backwards without gradient sync and\n";
    b += "# reduces once after the last (as fully_shard's FSDPModule).\n";
    b += "stage_module = _Stage(model)\n";
    b += fmt::format("fully_shard(stage_module, mesh=mesh, mp_policy=mp, reshard_after_forward={})\n", reshardArg(sh));
    b += fmt::format("stage = PipelineStage(stage_module, {}, {}, device, group=world[\"pp\"].get_group())\n", idx,
                     mesh.stages());
    if (interleaved) {
        s += fmt::format("stages_per_rank = {}  # stage pp_rank + k x {} for k < stages_per_rank\n", mesh.virtual_stages, mesh.pp);
        s += "whole_model = model\n";
        s += "def build_stage(stage_index, model):\n";
        size_t at = 0;
        while (at < b.size()) {
            const size_t end = b.find('\n', at);
            const std::string line = b.substr(at, end == std::string::npos ? std::string::npos : end - at);
            s += line.empty() ? "\n" : "    " + line + "\n";
            if (end == std::string::npos) break;
            at = end + 1;
        }
        s += "    return stage\n";
        s += fmt::format("stages = [build_stage(pp_rank + k * {}, copy.deepcopy(whole_model)) for k in range(stages_per_rank)]\n",
                         mesh.pp);
    } else {
        s += b;
    }
    s += "def loss_fn(logits, labels):\n";
    s += "    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))\n";
    s += fmt::format("schedule = {}({}, n_microbatches={}, loss_fn=loss_fn)\n", schedule,
                     mesh.virtual_stages > 1 ? "stages" : "stage", tr.grad_accum);
    s += fmt::format("# A step: the local batch of {} x {} sequences through the pipeline:\n", tr.grad_accum, tr.micro_batch);
    s += mesh.virtual_stages > 1
             ? "#   rank 0 (stage 0): schedule.step(input_ids); the last rank: schedule.step(target=labels, losses=losses); "
               "others: schedule.step()\n"
             : "#   first stage: schedule.step(input_ids); last: schedule.step(target=labels, losses=losses); others: schedule.step()\n";
    if (mesh.tp > 1 && sh.loss_parallel) {
        s += "# loss_parallel: run schedule.step inside `with torch.distributed.tensor.parallel.loss_parallel():`\n";
    }
    s += clipCode(tr);
    return s;
}

}  // namespace

std::string pytorchCode(const core::Plan& plan, const core::Mesh& mesh, const std::vector<std::vector<std::string>>& units) {
    if (mesh.pp > 1) return pipelineCode(plan, mesh, units);
    const core::TrainingSpec& tr = plan.training;
    const bool two_d = core::isHybrid(plan.sharding.strategy) || plan.sharding.strategy == core::Strategy::NoShard ||
                       mesh.replicate_size > 1;
    std::string s;
    s += fmt::format("# shardcast: {} on {} x {} ({} GPUs)\n", core::strategyName(plan.sharding.strategy),
                     plan.cluster.nodes, plan.cluster.gpu.name, mesh.world_size);
    if (plan.sharding.fsdp_version == 1) s += "# The plan models FSDP1; this applies the same units with FSDP2.\n";
    s += "import torch\n";
    s += "from torch.distributed.device_mesh import init_device_mesh\n";
    s += "from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy\n\n";
    // torchtitan's order: the float8 conversion (a model converter), then tensor parallelism, whose
    // float8 styles need the Float8Linear modules, then fully_shard.
    s += float8Code(plan);
    if (mesh.tp > 1) {
        // FSDP over TP (torchtitan's apply_tp, then fully_shard on the dp dimensions): tp innermost.
        s += tensorParallelCode(plan, mesh, false);
    } else if (two_d) {
        const int shard = plan.sharding.strategy == core::Strategy::NoShard ? 1 : mesh.shard_size;
        const int replicate = mesh.world_size / shard;
        s += fmt::format("mesh = init_device_mesh(\"cuda\", ({}, {}), mesh_dim_names=(\"replicate\", \"shard\"))\n", replicate,
                         shard);
    } else {
        s += fmt::format("mesh = init_device_mesh(\"cuda\", ({},), mesh_dim_names=(\"shard\",))\n", mesh.world_size);
    }
    const std::string param = tr.param_dtype ? torchDtype(*tr.param_dtype) : "None";
    const std::string reduce = tr.reduce_dtype ? torchDtype(*tr.reduce_dtype) : "None";
    s += fmt::format("mp = MixedPrecisionPolicy(param_dtype={}, reduce_dtype={})\n", param, reduce);
    s += loraCode(plan);
    s += checkpointCode(plan);
    const std::string raf = reshardArg(plan.sharding);
    for (const auto& unit : units) {
        std::string target;
        if (unit.size() == 1) {
            target = pythonModuleExpr(unit.front());
        } else if (std::string slice = sliceExpr(unit); !slice.empty()) {
            target = std::move(slice);
        } else {
            target.push_back('[');
            for (size_t i = 0; i < unit.size(); ++i) {
                if (i > 0) target.append(", ");
                target.append(pythonModuleExpr(unit[i]));
            }
            target.push_back(']');
        }
        s += fmt::format("fully_shard({}, mesh=mesh, mp_policy=mp, reshard_after_forward={})\n", target, raf);
    }
    s += "fully_shard(model, mesh=mesh, mp_policy=mp)\n";
    s += clipCode(tr);
    return s;
}

}  // namespace shardcast::sim
