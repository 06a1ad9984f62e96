#!/usr/bin/env python3
# setup: scripts/validate-memory.py --setup (a venv with torch and transformers==4.57.6)
# usage: VENV/bin/python scripts/torch_peer.py CONFIG.json --world N
#            [--micro-batch B] [--seq S] [--reshard true|false] [--ac none|full|op] [--attn sdpa|eager]
#            [--layers L] [--device auto|cuda|cpu] [--steps K] [--param-dtype bf16|fp32]
#            [--reduce-dtype fp32|bf16] [--hf-unpacked-mask keep|skip] [--dropout-impl auto|native|default]
#            [--attn-dropout P] [--tp T [--no-sp] [--loss-parallel]]
#            [--pp P --pp-stage S --grad-accum M [--pp-schedule 1F1B|GPipe|Interleaved1F1B
#             --pp-virtual-stages V]]
#            [--json OUT.json]      (JSON result on stdout, a per-category table on stderr)
"""Peer measurement: real PyTorch FSDP2 (fully_shard) training steps of a HuggingFace causal LM,
under FakeTensorMode (no real memory) with a fake process group (FakeStore, rank 0 of N), and
PyTorch's own FSDPMemTracker wrapped around model and optimizer. Prints the tracker's peak memory
per category in bytes: the categories at the global peak, and each category's own maximum.

What runs, per step: model(input_ids, labels) (HF computes the loss inside the root forward),
`del` of the model output (only the loss is kept, as torchtitan/HF Trainer do), loss.backward(),
AdamW(foreach=True).step(), zero_grad(set_to_none=True). fully_shard on every decoder block (or its
checkpoint_wrapper with --ac full|op) and on the root; MixedPrecisionPolicy(param_dtype, reduce_dtype).

--ac op is torchtitan's per-op selective AC (sac_policy below): each block under checkpoint_wrapper
with a create_selective_checkpoint_contexts policy that saves the outputs of aten.mm except every
second one (counted from 1 in each block's forward) and of SDPA's flash / efficient attention.
On the cpu device SDPA runs _scaled_dot_product_flash_attention_for_cpu, which a CUDA run's save
list never sees; it is saved here as the flash op it stands for (same outputs: out, logsumexp).
The model is built on the meta device, sharded, then materialised with to_empty under FakeTensorMode
(as torchtitan's scripts/estimate/estimation.py does); weights are never loaded.

Steps: --steps 2 (default) as in torchtitan's estimator and PyTorch's test_fsdp2_mem_tracker.py;
the peak statistics are reset at the start of each step and reported per step; the LAST step is
the steady state (AdamW state exists) and is what `peak`/`max_per_category` report.

Device: --device auto probes whether a fake 'cuda' tensor can run a backward on this machine; if
not (no CUDA driver: the C++ autograd engine calls hasPrimaryContext(0) and throws; no Python-level
torch.cuda mock reaches it), it uses 'cpu'. On 'cpu': SDPA picks _scaled_dot_product_flash_attention_for_cpu
(saves out + fp32 logsumexp, like CUDA flash/efficient); dropout is routed through native_dropout
(--dropout-impl auto) so it keeps a bool mask as CUDA does, not CPU's bf16 noise tensor; the tracker's
512-byte CUDA rounding is not applied.

Step 0 caveat: AdamW state created lazily inside FakeTensorMode makes DTensor allocate global-shape
fake tensors that the tracker counts (tens of GB of phantom OptState in step 0); use the last step.

--hf-unpacked-mask skip: transformers 4.5x (here 4.57.6) treats any position_ids as possibly packed and
materialises a [B,1,S,S] causal mask in training, so SDPA gets attn_mask (saved per layer as bf16) and
K/V are repeat_kv'ed to all heads; transformers 5.x returns no mask for unpacked rows (is_causal, native
GQA). 'skip' reproduces the 5.x behaviour. Default 'keep' = what the installed transformers does.

--attn-dropout P overrides the config's attention dropout (GPT-2 attn_pdrop 0.1): on the cpu device
SDPA has no fused kernel with dropout and runs the math path, which saves the s x s scores per
layer; a CUDA flash kernel with dropout saves no s x s tensor (its RNG state only), so with 0 the
CPU run keeps what a CUDA run keeps (the residual and embedding dropouts are unchanged).

--pp P --pp-stage S --grad-accum M (default pp 1: unchanged): one rank of pipeline stage S of P, as
torch.distributed.pipelining runs it with torchtitan's settings, without its P2P (the fake process
group carries no data): the model is cut to the stage (torchtitan's split: the embedding and the
output count as one block each; the other stages' blocks dropped, the embedding kept on the first
stage, the norm and lm_head on the last), fully_shard over the stage's world / P ranks with
reshard_after_forward False (torchtitan's default under pp), and the stage's schedule (1F1B: min(M,
P - S) warm-up forwards, then one backward and one forward alternately; GPipe) runs M micro-batches
as PipelineStage does: manual backward finalization, every backward without gradient sync or
reshard, then finalize_backward after the last. A stage after the first gets each micro-batch's
activations as a fresh [micro_batch, seq, hidden] param_dtype tensor that requires grad (its
receive buffer), dropped with its gradient after the micro-batch's backward (PipelineStage sends
the input gradient to the previous stage and drops it); a stage before the last keeps its output
until the backward, which gets a fresh gradient of the output's shape.

--pp-schedule Interleaved1F1B --pp-virtual-stages V: pipeline rank S holds stages S, S + P, ... of
P x V, each its own model part and FSDP root (as torchtitan builds them), and runs torch's own
action list for the rank (ScheduleInterleaved1F1B with its FSDP passes, from
torch.distributed.pipelining.schedules) as _PipelineScheduleRuntime does: UNSHARD unshards every
FSDP module of a stage with async_op=True and the stage's next compute waits for them; RESHARD
reshards a stage not yet finalized; REDUCE_GRAD finalizes the stage's backward (its reduction,
waited for at once). The stages sit in a container, itself fully_shard-ed but never run, so that
one tracker and one optimizer see them; before a stage's forward only its modules' tracker stats
are cleared.

--tp T (default 1: plain FSDP2 over a 1-D mesh of --world ranks, unchanged): FSDP2 composed with tensor
parallelism, for Llama-family models (q/k/v/o_proj, gate/up/down_proj, input/post_attention_layernorm) and
GPT-2 (its own plan, below). A 2-D mesh init_device_mesh(device, (world/T, T),
mesh_dim_names=("dp", "tp")); TP is applied first with parallelize_module(.., mesh["tp"], plan) using
torchtitan's Llama plan (models/llama3/infra/parallelize.py apply_tp): embed_tokens RowwiseParallel
(Replicate -> Shard(1)), final norm and both block norms SequenceParallel, self_attn / mlp
PrepareModuleInput Shard(1) -> Replicate, q/k/v and gate/up ColwiseParallel, o_proj and down_proj
RowwiseParallel(output Shard(1)), lm_head ColwiseParallel(input Shard(1), output Replicate, or Shard(-1)
kept as a DTensor with --loss-parallel, forward and backward then run inside loss_parallel()); then
AC wrapping and fully_shard over mesh["dp"] as above. Two HF-specific adaptations: (1) the embedding
output stays a DTensor (use_local_output=False) so that LlamaModel's mask / cache_position / rotary
bookkeeping, which reads inputs_embeds.shape[1], sees the global sequence; a pre-hook on each block turns
it into the local Shard(1) tensor torchtitan passes between blocks (only the first block sees a DTensor);
(2) transformers 4.57.6's decoder layer calls self_attn with keyword arguments only, so its
PrepareModuleInput uses input_kwarg_layouts={"hidden_states": Shard(1)} (position_embeddings, the mask
etc. pass through as plain tensors); a check hook makes sure hidden_states does arrive as Replicate.
Heads: 4.57.6's LlamaAttention reshapes with view(*input_shape, -1, head_dim) and only keeps
num_key_value_groups (a ratio, unchanged by TP), so no head count needs changing; older versions' integer
num_heads / num_key_value_heads attributes on self_attn, if present, are divided by T (listed in the JSON
as tp_attn_attrs_divided). --no-sp: no sequence parallelism (embedding and o/down_proj outputs Replicate,
norms not parallelized, no PrepareModuleInput). T must divide --world, the attention and KV head counts
and, with SP, --seq; tied input/output embeddings are refused (except GPT-2's, below). Extra JSON keys
(tp>1 only): tp, dp, sequence_parallel, loss_parallel, tp_attn_attrs_divided. With T > 1, DeviceMesh's
rank-tensor bookkeeping runs with the fake mode set aside (patch_device_mesh_tensor), since FSDP2 builds a
dp+tp DeviceMesh inside fully_shard. FSDP2 warns that the root returns a view tensor (the local logits);
harmless here.

--tp T on GPT-2 (GPT2LMHeadModel; torchtitan has no plan for it): a Megatron-style plan. Each block's
transformers Conv1D (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj; y = x @ W + b with W [in, out]) is first
replaced by the equivalent nn.Linear(in, out) holding W^T (Colwise/RowwiseParallel take nn.Linear only). Plan:
transformer.wte and transformer.wpe RowwiseParallel (Replicate -> Shard(1), the position table sharded by rows
too; both outputs kept as DTensors under SP, as above), transformer.ln_f SequenceParallel, lm_head
ColwiseParallel(input Shard(1), output Replicate, local); per block ln_1 / ln_2 SequenceParallel, attn and mlp
PrepareModuleInput Shard(1) -> Replicate on their one positional input (4.57.6's GPT2Block calls
self.attn(hidden_states, **kw) and self.mlp(hidden_states)), c_attn and c_fc ColwiseParallel, attn.c_proj and
mlp.c_proj RowwiseParallel(output Shard(1)); --no-sp as for Llama. Heads: GPT2Attention.forward splits the
local fused output with split(self.split_size) and views q/k/v as (.., -1, head_dim), so split_size (and, for
consistency, num_heads and embed_dim) are divided by T; c_attn's columns are not permuted to Megatron's
per-rank [q_i, k_i, v_i] order, which only values (not shapes) depend on. Tied embeddings are kept: both
styles shard the [vocab, hidden] weight as Shard(0), so after parallelize_module lm_head.weight is set to the
wte DTensor parameter again and FSDP2 sees one shared parameter (the same parameter count as without TP).
The vocabulary need not divide T: DTensor's uneven Shard(0) (rank 0 holds ceil(50257 / T) rows) works through
the MaskPartial embedding, the lm_head all-gather and FSDP2's dp sharding of the uneven TP-local rows. The
embedding dropout (embd_pdrop) runs on the Shard(1) DTensor (DTensor's random-op path; on a cpu mesh torch
only warns that random ops "may not have complete support"); block dropouts see local tensors.
--loss-parallel and --lora are refused for GPT-2 with --tp.

Needs torch >= 2.6 and transformers >= 4.45 (Llama-3.1 rope_scaling); measured with torch 2.15 and
transformers 4.57.6. A full-size 8B model takes 15-30 s per run on 2 CPU cores and ~10 GB of RAM.
"""
import argparse
import gc
import json
import os
import sys
import time
from collections import Counter
from copy import deepcopy

T_START = time.time()

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore

DT = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
TOTAL = "Total"


def probe_fake_cuda() -> str:
    """Return '' if a fake cuda tensor can do forward+backward here, else the error text."""
    try:
        with FakeTensorMode():
            x = torch.empty(8, 8, device="cuda", requires_grad=True)
            (x * 2).sum().backward()
        return ""
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


class Tracker(FSDPMemTracker):
    """FSDPMemTracker plus: each category's own max, where the global peak happened, attention ops."""

    def __init__(self, mod, optm):
        super().__init__(mod, optm)
        self.cat_max = {}
        self.cat_where = {}
        self.peak_where = None
        self.attn_ops = Counter()

    def reset_peaks(self):
        cur = self.get_tracker_snapshot("current")
        self._peak_mem_snap = deepcopy(cur)
        self._peak_mem = {d: s[TOTAL] for d, s in cur.items()}
        self.cat_max = deepcopy(cur)
        self.cat_where = {}
        self.peak_where = None

    def _update_snap(self, *args, **kwargs):
        super()._update_snap(*args, **kwargs)
        for dev, snap in self._curr_mem_snap.items():
            m = self.cat_max.setdefault(dev, {})
            for k, v in snap.items():
                if v > m.get(k, 0):
                    m[k] = v
                    self.cat_where[(dev, k)] = self._where()

    def _where(self):
        mods = sorted(self._mod_tracker.parents - {"Global"}, key=len)
        phase = "optimizer" if self._in_opt else ("backward" if self._mod_tracker.is_bw else "forward")
        return f"{phase} {mods[-1] if mods else '-'}"

    def _update_peak_stats(self, peak_state):
        before = dict(self._peak_mem)
        super()._update_peak_stats(peak_state)
        if self._peak_mem != before:
            self.peak_where = self._where()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not any(t == DTensor for t in types):
            name = str(func)
            if "attention" in name or "softmax" in name:
                self.attn_ops[name] += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def patch_moe_balanced_routing():
    """HF Mixtral's MoE block picks each expert's tokens with nonzero() and torch.where(), whose
    output sizes depend on the data: FakeTensorMode refuses them (DynamicOutputShapeException). This
    runs the same block with the routing fixed and balanced, the assumption shardcast plans with:
    token t goes to experts (t*k + j) mod E, j < k, so each expert gets tokens*k/E of them. Everything
    else is HF's code path (router, fp32 softmax, topk, one-hot mask, the per-expert gather, MLP,
    routing-weight product and index_add_), so autograd saves what it saves for real routing."""
    from transformers.models.mixtral import modeling_mixtral as mm
    import torch.nn.functional as F

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype,
                                          device=hidden_states.device)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        n, k, e_count = batch_size * sequence_length, self.top_k, self.num_experts
        for expert_idx in range(e_count):
            # The (token, slot) pairs p = t*k + j with p mod E == expert_idx.
            flat = torch.arange(expert_idx, n * k, e_count, dtype=torch.long, device=hidden_states.device)
            idx, top_x = flat % k, flat // k
            expert_layer = self.experts[expert_idx]
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        del expert_mask
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits

    mm.MixtralSparseMoeBlock.forward = forward


def patch_deepseek_v3_balanced_routing():
    """DeepSeek-V3's DeepseekV3MoE.moe picks each expert's tokens with torch.where() too: the same
    fixed, balanced routing as patch_moe_balanced_routing (token t to experts (t*k + j) mod E), the
    router (fp32 linear, sigmoid, grouped top-k, gather, normalisation) and the rest of moe() as HF
    runs them."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dm

    def moe(self, hidden_states, topk_indices, topk_weights):
        final_hidden_states = torch.zeros_like(hidden_states, dtype=topk_weights.dtype)
        expert_mask = torch.nn.functional.one_hot(topk_indices, num_classes=len(self.experts))
        expert_mask = expert_mask.permute(2, 0, 1)
        n, k, e_count = hidden_states.shape[0], topk_indices.shape[1], len(self.experts)
        for expert_idx in range(e_count):
            expert = self.experts[expert_idx]
            if expert_idx >= n * k:
                continue
            flat = torch.arange(expert_idx, n * k, e_count, dtype=torch.long, device=hidden_states.device)
            token_indices, weight_indices = flat // k, flat % k
            expert_weights = topk_weights[token_indices, weight_indices]
            expert_input = hidden_states[token_indices]
            expert_output = expert(expert_input)
            weighted_output = expert_output * expert_weights.unsqueeze(-1)
            final_hidden_states.index_add_(0, token_indices, weighted_output)
        del expert_mask
        return final_hidden_states.type(hidden_states.dtype)

    dm.DeepseekV3MoE.moe = moe


def patch_dropout_like_cuda():
    """On CPU, F.dropout runs at::_dropout, which keeps a noise tensor in the input dtype (2 bytes per
    element in bf16) for backward. CUDA takes the fused at::native_dropout, which keeps a bool mask
    (1 byte). Route training-mode dropout through torch.native_dropout so a CPU run saves what a
    CUDA run saves."""
    import torch.nn.functional as F
    orig = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and not inplace and input.is_floating_point():
            return torch.native_dropout(input, p, True)[0]
        return orig(input, p, training, inplace)

    F.dropout = dropout


# torchtitan's per-op SAC save list (torchtitan/models/llama/parallelize_llama.py, _save_list, and
# the policy of _apply_ac_to_transformer_block), plus the CPU flash kernel (see the header).
def sac_save_list():
    ops = torch.ops
    save = {ops.aten.mm.default, ops.aten._scaled_dot_product_efficient_attention.default,
            ops.aten._scaled_dot_product_flash_attention.default,
            ops._c10d_functional.reduce_scatter_tensor.default, ops.aten.max.default}
    cpu_flash = getattr(ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_flash is not None:
        save.add(cpu_flash.default)
    return save


def sac_context_fn():
    """A fresh per-op SAC context per checkpointed forward: MUST_SAVE for the ops in the save list,
    except every second aten.mm (torchtitan's "forward_mm_count" % 2 == 0), PREFER_RECOMPUTE for the
    rest. The recompute replays the forward's decisions (torch.utils.checkpoint._CachedTorchDispatchMode
    looks them up by op and call index), so only the forward's count matters."""
    from collections import defaultdict
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    save = sac_save_list()
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[f"{mode}_mm_count"] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def decoder_layers(model):
    """The ModuleList of decoder blocks (Llama/Qwen/Mistral: model.layers; GPT-2: transformer.h)."""
    for parent_path, attr in (("model", "layers"), ("transformer", "h"), ("gpt_neox", "layers"), ("model.decoder", "layers")):
        parent = model
        ok = True
        for p in parent_path.split("."):
            if not hasattr(parent, p):
                ok = False
                break
            parent = getattr(parent, p)
        if ok and hasattr(parent, attr):
            return getattr(parent, attr)
    raise SystemExit("cannot find the decoder block list of this model")


def _fqn(root, mod):
    for name, m in root.named_modules():
        if m is mod:
            return name
    raise SystemExit("--tp: module not found in the model")


def _blocks_to_local(mod, args, kwargs):
    """Block pre-hook (SP): the embedding's Shard(1) DTensor becomes the local sequence shard, as
    torchtitan passes it between blocks (its backward wraps the grad back as Shard(1))."""
    if args and isinstance(args[0], DTensor):
        args = (args[0].to_local(),) + tuple(args[1:])
    if isinstance(kwargs.get("hidden_states"), DTensor):
        kwargs = dict(kwargs, hidden_states=kwargs["hidden_states"].to_local())
    return args, kwargs


def _check_attn_replicated(mod, args, kwargs):
    from torch.distributed.tensor import Replicate
    hs = kwargs["hidden_states"] if "hidden_states" in kwargs else (args[0] if args else None)
    if not (isinstance(hs, DTensor) and tuple(hs.placements) == (Replicate(),)):
        raise SystemExit(f"--tp: self_attn got hidden_states as {type(hs).__name__} "
                         f"{getattr(hs, 'placements', '')}, not a Replicate DTensor; this transformers "
                         "version calls self_attn differently from 4.57.6")


def patch_device_mesh_tensor():
    """DeviceMesh keeps its ranks in a real int tensor (_rank_map) and recomputes the mesh tensor and this
    rank's coordinates from it in __init__ and on every .mesh access; FSDP2 concatenates the dp and tp
    meshes into a new DeviceMesh inside fully_shard, i.e. inside FakeTensorMode, which refuses the real
    tensor. That tensor is mesh metadata, not model memory: run these with the fake mode set aside."""
    import functools
    from torch.distributed.device_mesh import DeviceMesh
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def real(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with unset_fake_temporarily():
                return fn(*args, **kwargs)
        return inner

    DeviceMesh.__init__ = real(DeviceMesh.__init__)
    DeviceMesh.__repr__ = real(DeviceMesh.__repr__)
    DeviceMesh.mesh = property(real(DeviceMesh.mesh.fget))


def _conv1d_to_linear(parent, name):
    """Replace transformers' Conv1D parent.<name> (y = x @ W + b, W [in, out]) by the equivalent
    nn.Linear(in, out) holding W^T, on the same device and dtype (meta here, before to_empty)."""
    conv = getattr(parent, name)
    nx, nf = conv.weight.shape
    lin = torch.nn.Linear(nx, nf, bias=True, device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        lin.weight.copy_(conv.weight.t())
        lin.bias.copy_(conv.bias)
    lin.weight.requires_grad_(conv.weight.requires_grad)
    lin.bias.requires_grad_(conv.bias.requires_grad)
    setattr(parent, name, lin)


def apply_tp_gpt2(model, layers, cfg, tp_mesh, tp, sp):
    """Megatron-style TP (+SP) for HF GPT-2 (see the header). Returns the attention attributes divided by tp."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    from transformers.pytorch_utils import Conv1D
    tr = getattr(model, "transformer", None)
    if tr is None or not all(hasattr(tr, n) for n in ("wte", "wpe", "ln_f")) or not hasattr(model, "lm_head"):
        raise SystemExit("--tp > 1 on gpt2 needs GPT2LMHeadModel (transformer.wte/wpe/ln_f, lm_head)")
    if getattr(cfg, "add_cross_attention", False):
        raise SystemExit("--tp > 1 on gpt2: cross-attention is not supported")
    for blk in layers:
        for parent, name in ((blk.attn, "c_attn"), (blk.attn, "c_proj"), (blk.mlp, "c_fc"), (blk.mlp, "c_proj")):
            if not isinstance(getattr(parent, name), Conv1D):
                raise SystemExit(f"--tp > 1 on gpt2: {name} is {type(getattr(parent, name)).__name__}, not Conv1D")
            _conv1d_to_linear(parent, name)

    # 4.57.6's GPT2Attention.forward splits the fused c_attn output with split(self.split_size, dim=2) and
    # views q/k/v as (.., -1, head_dim): with c_attn column-sharded each rank holds 3*hidden/tp columns, so
    # split_size must be hidden/tp (num_heads and embed_dim are divided too for consistency; head_dim stays).
    # A real Megatron implementation permutes c_attn's columns so that rank i's slice is [q_i, k_i, v_i];
    # under FakeTensorMode only the shapes matter, so the columns are left in HF's [q, k, v] order.
    divided = []
    for blk in layers:
        for attr in ("split_size", "num_heads", "embed_dim"):
            v = getattr(blk.attn, attr)
            if v % tp:
                raise SystemExit(f"--tp {tp} does not divide GPT2Attention.{attr} ({v})")
            setattr(blk.attn, attr, v // tp)
            if attr not in divided:
                divided.append(attr)

    seq_l = Shard(1) if sp else Replicate()
    root_plan = {
        # SP: keep the DTensors so GPT2Model's mask / position bookkeeping sees the global sequence;
        # the position table is sharded by rows like the token table (MaskPartial, then reduce-scatter)
        "transformer.wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_l, use_local_output=not sp),
        "transformer.wpe": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_l, use_local_output=not sp),
        "lm_head": ColwiseParallel(input_layouts=seq_l, output_layouts=Replicate(), use_local_output=True),
    }
    if sp:
        root_plan["transformer.ln_f"] = SequenceParallel()
    parallelize_module(model, tp_mesh, root_plan)
    # Tied embeddings: RowwiseParallel (embedding) and ColwiseParallel (linear) both shard the [vocab, hidden]
    # weight as Shard(0), so one DTensor parameter serves both; parallelize_module made two, re-tie them so
    # that FSDP2 sees one parameter, as without TP.
    model.lm_head.weight = model.transformer.wte.weight
    assert model.lm_head.weight is model.transformer.wte.weight
    for blk in layers:
        plan = {
            "attn.c_attn": ColwiseParallel(), "attn.c_proj": RowwiseParallel(output_layouts=seq_l),
            "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel(output_layouts=seq_l),
        }
        if sp:
            plan.update({
                "ln_1": SequenceParallel(), "ln_2": SequenceParallel(),
                # transformers 4.57.6's GPT2Block calls self.attn(hidden_states, past_key_values=.., ...) and
                # self.mlp(hidden_states): hidden_states is positional in both
                "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(blk, tp_mesh, plan)
        if sp:
            blk.attn.register_forward_pre_hook(_check_attn_replicated, with_kwargs=True)
            blk.register_forward_pre_hook(_blocks_to_local, with_kwargs=True)
    return divided


def apply_tp(model, layers, cfg, tp_mesh, tp, sp, loss_par):
    """TP (+SP) with torchtitan's Llama plan, HF module names. Returns the attention attributes divided by tp."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    if cfg.model_type == "gpt2":
        return apply_tp_gpt2(model, layers, cfg, tp_mesh, tp, sp)
    base = getattr(model, "model", None)
    need_blk = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")
    def has(mod, path):
        for part in path.split("."):
            if not hasattr(mod, part):
                return False
            mod = getattr(mod, part)
        return isinstance(mod, torch.nn.Module)

    if not (base is not None and has(base, "embed_tokens") and has(base, "norm") and has(model, "lm_head")
            and all(has(blk, n) for blk in layers for n in need_blk)):
        raise SystemExit(f"--tp > 1 supports Llama-family models and GPT-2 only ({cfg.model_type} does not have the "
                         "q/k/v/o_proj, gate/up/down_proj, *_layernorm, embed_tokens, norm, lm_head modules)")
    if model.get_output_embeddings().weight is model.get_input_embeddings().weight:
        raise SystemExit("--tp > 1: tied input/output embeddings are not supported")

    divided = []
    for blk in layers:
        attn = blk.self_attn
        for attr in ("num_heads", "num_key_value_heads", "num_attention_heads"):
            v = getattr(attn, attr, None)
            if isinstance(v, int) and not isinstance(v, bool):
                setattr(attn, attr, v // tp)
                if attr not in divided:
                    divided.append(attr)

    seq_l = Shard(1) if sp else Replicate()
    root_plan = {
        # SP: keep the DTensor so HF's mask / position bookkeeping sees the global sequence (see header)
        _fqn(model, base.embed_tokens): RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_l,
                                                        use_local_output=not sp),
        _fqn(model, model.lm_head): ColwiseParallel(input_layouts=seq_l,
                                                    output_layouts=Shard(-1) if loss_par else Replicate(),
                                                    use_local_output=not loss_par),
    }
    if sp:
        root_plan[_fqn(model, base.norm)] = SequenceParallel()
    parallelize_module(model, tp_mesh, root_plan)
    for blk in layers:
        plan = {
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(output_layouts=seq_l),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=seq_l),
        }
        if sp:
            plan.update({
                "input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                # transformers 4.57.6 calls self_attn with keywords only, mlp with one positional argument
                "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(blk, tp_mesh, plan)
        if sp:
            blk.self_attn.register_forward_pre_hook(_check_attn_replicated, with_kwargs=True)
            blk.register_forward_pre_hook(_blocks_to_local, with_kwargs=True)
    return divided


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="HuggingFace config.json")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reshard", default="true", choices=["true", "false"])
    ap.add_argument("--ac", default="none", choices=["none", "full", "op"],
                    help="full: checkpoint_wrapper per block; op: torchtitan's per-op SAC per block")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--layers", type=int, default=0, help="override num_hidden_layers (0: keep)")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=2, help="tracked steps; the last one is reported (step 0 carries a fake-mode AdamW-init artifact)")
    ap.add_argument("--param-dtype", default="bf16", choices=list(DT))
    ap.add_argument("--reduce-dtype", default="fp32", choices=list(DT))
    ap.add_argument("--hf-unpacked-mask", default="keep", choices=["keep", "skip"],
                    help="skip: make transformers 4.5x treat unpacked position_ids as unpacked (as transformers 5.x "
                         "does), so SDPA runs is_causal without a materialised mask and with native GQA")
    ap.add_argument("--dropout-impl", default="auto", choices=["auto", "native", "default"],
                    help="auto: on the cpu device, run dropout as CUDA does (native_dropout, bool mask)")
    ap.add_argument("--attn-dropout", type=float, default=None,
                    help="override the attention dropout probability (attn_pdrop / attention_dropout)")
    ap.add_argument("--tp", type=int, default=1,
                    help="tensor-parallel degree (Llama family, GPT-2): 2-D mesh (world/tp, tp), TP then FSDP2 over dp")
    ap.add_argument("--no-sp", action="store_true", help="with --tp > 1: no sequence parallelism")
    ap.add_argument("--loss-parallel", action="store_true",
                    help="with --tp > 1: lm_head output stays vocab-sharded, loss under loss_parallel()")
    ap.add_argument("--no-gc-disable", action="store_true", help="keep Python gc enabled (torchtitan disables it)")
    ap.add_argument("--pp", type=int, default=1, help="pipeline stages (needs --pp-stage and --grad-accum)")
    ap.add_argument("--pp-stage", type=int, default=0, help="with --pp: the stage this rank runs")
    ap.add_argument("--pp-schedule", default="1F1B", choices=["1F1B", "GPipe", "Interleaved1F1B"])
    ap.add_argument("--pp-virtual-stages", type=int, default=1,
                    help="with --pp-schedule Interleaved1F1B: stages per pipeline rank (--pp-stage is then the rank)")
    ap.add_argument("--grad-accum", type=int, default=1, help="with --pp: micro-batches per step")
    ap.add_argument("--lora", default="",
                    help="RANK[:MODULES]: PEFT LoRA adapters (lora_alpha 2 x RANK, dropout 0) on the comma-separated "
                         "module names (default q_proj,k_proj,v_proj,o_proj); the base model frozen")
    ap.add_argument("--json", default="", help="also write the result JSON here")
    ap.add_argument("--eval-step", action="store_true",
                    help="after the training steps, one eval step (model.eval(), torch.no_grad(), the same batch with "
                         "labels), its peak reported as \"eval\" (not with --pp)")
    a = ap.parse_args()

    if a.tp < 1 or a.world % a.tp:
        raise SystemExit(f"--tp {a.tp} must be >= 1 and divide --world {a.world}")
    if a.tp == 1 and (a.no_sp or a.loss_parallel):
        raise SystemExit("--no-sp / --loss-parallel need --tp > 1")
    if a.pp > 1 and (a.tp > 1 or a.world % a.pp or not 0 <= a.pp_stage < a.pp):
        raise SystemExit("--pp P needs --tp 1, P dividing --world and 0 <= --pp-stage < P")
    if (a.pp_schedule == "Interleaved1F1B") != (a.pp_virtual_stages > 1):
        raise SystemExit("--pp-schedule Interleaved1F1B goes with --pp-virtual-stages V >= 2, and V > 1 with it only")
    from transformers import AutoConfig, AutoModelForCausalLM
    import transformers
    if a.hf_unpacked_mask == "skip":
        import transformers.masking_utils as mu
        mu.find_packed_sequence_indices = lambda position_ids: None

    device = a.device
    cuda_err = ""
    if device in ("auto", "cuda"):
        cuda_err = probe_fake_cuda()
        if cuda_err:
            if device == "cuda":
                raise SystemExit(f"fake cuda unusable here: {cuda_err}")
            device = "cpu"
        else:
            device = "cuda"

    dropout_impl = a.dropout_impl
    if dropout_impl == "auto":
        dropout_impl = "native" if device == "cpu" else "default"
    if dropout_impl == "native":
        patch_dropout_like_cuda()

    if not a.no_gc_disable:
        gc.disable()
        gc.collect(1)

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=a.world)
    if device == "cuda":
        torch.cuda.set_device(0)
    # outside FakeTensorMode, as torchtitan does
    if a.pp > 1:
        mesh = init_device_mesh(device, (a.pp, a.world // a.pp), mesh_dim_names=("pp", "dp"))["dp"]
        tp_mesh = None
    elif a.tp == 1:
        mesh = init_device_mesh(device, (a.world,))
        tp_mesh = None
    else:
        patch_device_mesh_tensor()
        mesh2d = init_device_mesh(device, (a.world // a.tp, a.tp), mesh_dim_names=("dp", "tp"))
        mesh, tp_mesh = mesh2d["dp"], mesh2d["tp"]

    cfg = AutoConfig.from_pretrained(a.config)
    if a.layers:
        cfg.num_hidden_layers = a.layers
    moe_routing = ""
    if cfg.model_type == "deepseek_v3":
        patch_deepseek_v3_balanced_routing()
        moe_routing = "balanced (token t to experts (t*k + j) mod E: FakeTensorMode refuses HF's data-dependent routing)"
    if cfg.model_type == "mixtral":
        patch_moe_balanced_routing()
        moe_routing = "balanced (token t to experts (t*k + j) mod E: FakeTensorMode refuses HF's data-dependent routing)"
        if getattr(cfg, "router_jitter_noise", 0):
            cfg.router_jitter_noise = 0.0
    if a.tp > 1:
        heads = cfg.num_attention_heads
        kv = getattr(cfg, "num_key_value_heads", None) or heads
        if heads % a.tp or kv % a.tp:
            raise SystemExit(f"--tp {a.tp} must divide the attention heads ({heads}) and KV heads ({kv})")
        if not a.no_sp and a.seq % a.tp:
            raise SystemExit(f"--tp {a.tp} with sequence parallelism must divide --seq {a.seq}")
        if cfg.model_type == "gpt2" and (a.loss_parallel or a.lora):
            raise SystemExit("--tp > 1 on gpt2: --loss-parallel and --lora are not supported (the lm_head output "
                             "is gathered to Replicate; LoRA would wrap the Conv1D layers the TP plan replaces)")
    cfg.use_cache = False
    attn_dropout_fields = [f for f in ("attn_pdrop", "attention_dropout") if hasattr(cfg, f)]
    if a.attn_dropout is not None:
        if not attn_dropout_fields:
            raise SystemExit(f"--attn-dropout: {a.config} has no attn_pdrop or attention_dropout field")
        for f in attn_dropout_fields:
            setattr(cfg, f, a.attn_dropout)
    mp = MixedPrecisionPolicy(param_dtype=DT[a.param_dtype], reduce_dtype=DT[a.reduce_dtype])
    reshard = a.reshard == "true"
    timings = {}
    steps_out = []

    with FakeTensorMode():
        t0 = time.time()
        nstages = a.pp * a.pp_virtual_stages
        counts = []
        if a.pp > 1:
            # torchtitan's generate_llm_fqn_per_model_part (input and output weight 1 each)
            nl = cfg.num_hidden_layers
            per, extra = divmod(nl + 2, nstages)
            left = nl
            for g in range(nstages):
                take = per + (1 if g < extra else 0) - (1 if g == 0 else 0) - (1 if g == nstages - 1 else 0)
                take = max(0, min(take, left))
                counts.append(take)
                left -= take
            reshard = False  # torchtitan's default under pp

        def build(g):
            """The model cut to pipeline stage g (the whole model without pp), checkpoint-wrapped and sharded."""
            with torch.device("meta"):
                m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32, attn_implementation=a.attn)
            lays = decoder_layers(m)
            first = last = True
            if a.pp > 1:
                begin = sum(counts[:g])
                first, last = g == 0, g == nstages - 1
                m.model.layers = torch.nn.ModuleList(list(lays)[begin:begin + counts[g]])
                lays = m.model.layers
                if not first:
                    m.model.embed_tokens = None
                if not last:
                    m.model.norm = torch.nn.Identity()
                    m.lm_head = torch.nn.Identity()
            if a.lora:
                from peft import LoraConfig, get_peft_model
                rank, _, mods = a.lora.partition(":")
                targets = mods.split(",") if mods else ["q_proj", "k_proj", "v_proj", "o_proj"]
                with torch.device("meta"):
                    m = get_peft_model(m, LoraConfig(r=int(rank), lora_alpha=2 * int(rank), lora_dropout=0.0,
                                                     target_modules=targets))
                lays = decoder_layers(m.base_model.model)
            divided = apply_tp(m, lays, cfg, tp_mesh, a.tp, not a.no_sp, a.loss_parallel) if a.tp > 1 else None
            for i in range(len(lays)):
                blk = lays[i]
                if a.ac == "full":
                    blk = checkpoint_wrapper(blk, preserve_rng_state=False)
                    lays[i] = blk
                elif a.ac == "op":
                    blk = checkpoint_wrapper(blk, context_fn=sac_context_fn, preserve_rng_state=False)
                    lays[i] = blk
                fully_shard(blk, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            fully_shard(m, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            return m, first, last, divided

        if a.pp_virtual_stages > 1:
            # Interleaved1F1B: this rank's stages r, r + pp, ..., each its own model part and FSDP
            # root (torchtitan); a container, sharded too but never run, lets one tracker and one
            # optimizer see them all.
            stages = {}
            for k in range(a.pp_virtual_stages):
                g = a.pp_stage + k * a.pp
                sm, first, last, _ = build(g)
                stages[g] = (sm, first, last)
            class _Parts(torch.nn.Module):  # fully_shard needs a module with a forward
                def __init__(self, parts):
                    super().__init__()
                    self.parts = torch.nn.ModuleList(parts)

                def forward(self, *args, **kwargs):
                    raise RuntimeError("the stages run one by one")

            model = _Parts([sm for sm, _, _ in stages.values()])
            fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            first_stage, last_stage = 0 in stages, nstages - 1 in stages
            tp_divided = None
        else:
            model, first_stage, last_stage, tp_divided = build(a.pp_stage if a.pp > 1 else 0)
        model.to_empty(device=device)
        model.train()
        optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)
        ids = torch.randint(0, cfg.vocab_size, (a.micro_batch, a.seq), device=device)
        labels = torch.randint(0, cfg.vocab_size, (a.micro_batch, a.seq), device=device)
        timings["build_s"] = time.time() - t0
        n_params = sum(p.numel() for p in model.parameters())

        fmt = Tracker(model, optim)
        fmt.track_inputs((ids, labels))
        if a.tp > 1 and a.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel
            loss_ctx = loss_parallel
        else:
            from contextlib import nullcontext as loss_ctx
        def pipeline_step():
            m = a.grad_accum
            if a.pp_schedule == "GPipe":
                actions = [(False, i) for i in range(m)] + [(True, i) for i in range(m)]
            else:
                warm = min(m, a.pp - a.pp_stage)
                actions, f, b = [(False, i) for i in range(warm)], warm, 0
                while True:
                    actions.append((True, b)); b += 1
                    if f == m:
                        break
                    actions.append((False, f)); f += 1
                actions += [(True, i) for i in range(b, m)]
            model.set_manual_backward_finalization(True)
            held, inputs = {}, {}
            for backward, mb in actions:
                if not backward:
                    # FSDPMemTracker refuses a second forward of the root in one iteration unless its
                    # per-module stats are cleared; its category totals and peaks are kept.
                    fmt.reset_mod_stats()
                    if first_stage:
                        out = model(input_ids=ids, use_cache=False).logits
                    else:
                        x = torch.randn(a.micro_batch, a.seq, cfg.hidden_size, device=device,
                                        dtype=DT[a.param_dtype], requires_grad=True)
                        out = model(inputs_embeds=x, use_cache=False).logits
                        inputs[mb] = x
                        del x
                    if last_stage:
                        out = torch.nn.functional.cross_entropy(out.flatten(0, 1).float(), labels.flatten(0, 1))
                    held[mb] = out
                    del out
                else:
                    model.set_reshard_after_backward(False)
                    model.set_requires_gradient_sync(False)
                    out = held.pop(mb)
                    if last_stage:
                        out.backward()
                    else:
                        torch.autograd.backward(out, grad_tensors=torch.randn_like(out))
                    del out
                    # The input gradient goes to the previous stage: PipelineStage sends it and drops
                    # it (something in the harness keeps the input itself alive: its gradient is
                    # cleared by hand).
                    x = inputs.pop(mb, None)
                    if x is not None:
                        x.grad = None
                        del x
            model.set_requires_gradient_sync(True)
            model.set_reshard_after_backward(True)
            model.finalize_backward(async_op=True).wait()
            model.set_manual_backward_finalization(False)

        def interleaved_step():
            """ScheduleInterleaved1F1B's actions for this rank, from torch's own passes
            (_calculate_single_rank_operations, _add_unshard_reshard with max_active_stages 3,
            _add_reduce_grad), run as _PipelineScheduleRuntime runs them with FSDP: UNSHARD
            unshards every FSDP module of a stage at once and the stage's next compute waits for
            them; every backward without gradient sync or reshard; REDUCE_GRAD finalizes the
            stage (start_gradient_reduction, wait_for_gradient_reduction); RESHARD reshards a
            stage not yet finalized."""
            from torch.distributed.fsdp import FSDPModule
            from torch.distributed.pipelining import schedules as S
            m = a.grad_accum
            sched = S.ScheduleInterleaved1F1B.__new__(S.ScheduleInterleaved1F1B)
            sched.pp_group_size, sched.n_local_stages, sched._n_microbatches = a.pp, a.pp_virtual_stages, m
            sched.number_of_rounds = max(1, m // a.pp)
            sched.microbatches_per_round = m // sched.number_of_rounds
            acts = sched._calculate_single_rank_operations(a.pp_stage)
            acts = S._add_reduce_grad(S._add_unshard_reshard(acts, max_active_stages=3), m)
            for sm, _, _ in stages.values():
                sm.set_manual_backward_finalization(True)
            held, handles, finalized, inputs = {}, {}, set(), {}
            for act in acts:
                if act is None:
                    continue
                g, mb = act.stage_index, act.microbatch_index
                kind = {S.FORWARD: "F", S.FULL_BACKWARD: "B", S.UNSHARD: "UNSHARD", S.RESHARD: "RESHARD",
                        S.REDUCE_GRAD: "REDUCE_GRAD", S.WAIT_REDUCE_GRAD: "WAIT"}.get(act.computation_type, "")
                if not kind:
                    raise SystemExit(f"unexpected pipeline action {act}")
                sm, first, last = stages[g]
                fsdp_mods = [x for x in sm.modules() if isinstance(x, FSDPModule)]
                if kind == "UNSHARD":
                    handles[g] = [x.unshard(async_op=True) for x in fsdp_mods]
                elif kind == "RESHARD":
                    if g in finalized:
                        finalized.discard(g)
                    else:
                        for x in fsdp_mods:
                            x.reshard()
                elif kind == "WAIT":
                    continue  # REDUCE_GRAD below waits for its reduction at once
                elif kind == "REDUCE_GRAD":
                    sm.set_requires_gradient_sync(True)
                    sm.set_reshard_after_backward(True)
                    sm.finalize_backward(async_op=True).wait()
                    sm.set_manual_backward_finalization(False)
                    finalized.add(g)
                elif kind in ("F", "B"):
                    for h in handles.pop(g, []):
                        if h is not None:
                            h.wait()
                    if kind == "F":
                        # The tracker refuses a second forward of a root in one iteration unless its
                        # per-module stats are cleared: clear this stage's only (the other stages'
                        # pending backwards still read theirs); category totals and peaks are kept.
                        for x in sm.modules():
                            fmt.memory_tracking.pop(x, None)
                        if first:
                            out = sm(input_ids=ids, use_cache=False).logits
                        else:
                            x = torch.randn(a.micro_batch, a.seq, cfg.hidden_size, device=device,
                                            dtype=DT[a.param_dtype], requires_grad=True)
                            out = sm(inputs_embeds=x, use_cache=False).logits
                            inputs[(g, mb)] = x
                            del x
                        if last:
                            out = torch.nn.functional.cross_entropy(out.flatten(0, 1).float(), labels.flatten(0, 1))
                        held[(g, mb)] = out
                        del out
                    else:
                        sm.set_reshard_after_backward(False)
                        sm.set_requires_gradient_sync(False)
                        out = held.pop((g, mb))
                        if last:
                            out.backward()
                        else:
                            torch.autograd.backward(out, grad_tensors=torch.randn_like(out))
                        del out
                        x = inputs.pop((g, mb), None)  # its gradient sent to the previous stage
                        if x is not None:
                            x.grad = None
                            del x

        with fmt:
            for it in range(a.steps):
                fmt.reset_peaks()
                t1 = time.time()
                if a.pp_virtual_stages > 1:
                    interleaved_step()
                elif a.pp > 1:
                    pipeline_step()
                else:
                    with loss_ctx():
                        out = model(input_ids=ids, labels=labels, use_cache=False)
                        loss = out.loss
                        del out
                        loss.backward()
                        del loss
                optim.step()
                optim.zero_grad()
                dt = time.time() - t1
                dev = next(iter(fmt._peak_mem_snap))
                peak = {getattr(k, "value", str(k)): int(v) for k, v in fmt._peak_mem_snap[dev].items()}
                catmax = {getattr(k, "value", str(k)): int(v) for k, v in fmt.cat_max.get(dev, {}).items()}
                steps_out.append({
                    "step": it, "wall_s": round(dt, 3), "device": str(dev),
                    "peak_bytes": peak.pop(TOTAL), "at_peak": peak,
                    "max_per_category": {k: v for k, v in catmax.items() if k != TOTAL},
                    "peak_where": fmt.peak_where,
                    "max_where": {getattr(k, "value", str(k)): w for (d, k), w in fmt.cat_where.items() if d == dev},
                })
                if it == 0:
                    fmt.reset_mod_stats()  # as torchtitan: iteration 0 has no optimizer state
                gc.collect(1)
            eval_out = None
            if a.eval_step and a.pp == 1:
                # An eval step in the steady state: optimizer state held, gradients set to None.
                model.eval()
                fmt.reset_mod_stats()  # the tracker takes one forward per module between resets
                fmt.reset_peaks()
                with torch.no_grad(), loss_ctx():
                    out = model(input_ids=ids, labels=labels, use_cache=False)
                    del out
                model.train()
                dev = next(iter(fmt._peak_mem_snap))
                peak = {getattr(k, "value", str(k)): int(v) for k, v in fmt._peak_mem_snap[dev].items()}
                eval_out = {"peak_bytes": peak.pop(TOTAL), "at_peak": peak}
        other_devs = {str(d): s[TOTAL] for d, s in fmt._peak_mem_snap.items() if str(d) != steps_out[-1]["device"]}

    res = {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "config": a.config, "model_type": cfg.model_type, "layers": cfg.num_hidden_layers,
        "params": n_params, "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "lora": a.lora, "world": a.world, "micro_batch": a.micro_batch, "seq": a.seq,
        "reshard_after_forward": reshard, "ac": a.ac, "attn_implementation": a.attn,
        "attention_ops": dict(fmt.attn_ops), "device": device,
        "fake_cuda_error": cuda_err, "dropout_impl": dropout_impl,
        "moe_routing": moe_routing,
        "attn_dropout": {f: getattr(cfg, f) for f in attn_dropout_fields}, "hf_unpacked_mask": a.hf_unpacked_mask, "param_dtype": a.param_dtype, "reduce_dtype": a.reduce_dtype,
        "optimizer": "AdamW(foreach=True)", "gc_disabled": not a.no_gc_disable,
        "other_devices_peak_bytes": other_devs,
        "steps": steps_out,
        "peak_bytes": steps_out[-1]["peak_bytes"], "at_peak": steps_out[-1]["at_peak"],
        "max_per_category": steps_out[-1]["max_per_category"],
        "eval": eval_out,
        "timings": {**timings, "steps_s": [s["wall_s"] for s in steps_out],
                    "process_s": round(time.time() - T_START, 3)},
    }
    tp_note = ""
    if a.pp > 1:
        res.update({"pp": a.pp, "pp_stage": a.pp_stage, "pp_schedule": a.pp_schedule, "grad_accum": a.grad_accum,
                    "pp_virtual_stages": a.pp_virtual_stages})
        tp_note = f", pp stage {a.pp_stage} of {a.pp} ({a.pp_schedule}, {a.grad_accum} micro-batches)"
    if a.tp > 1:
        res.update({"tp": a.tp, "dp": a.world // a.tp, "sequence_parallel": not a.no_sp,
                    "loss_parallel": a.loss_parallel, "tp_attn_attrs_divided": tp_divided})
        tp_note = f", dp {a.world // a.tp} x tp {a.tp}" + ("" if a.no_sp else " (SP)") + (" loss-parallel" if a.loss_parallel else "")
    # human-readable summary on stderr; the JSON on stdout is the machine-readable result
    last = steps_out[-1]
    print(f"FSDPMemTracker, step {last['step']} (steady state), device {device}{tp_note}, bytes; peak at {last['peak_where']}",
          file=sys.stderr)
    print(f"{'category':16s} {'at peak':>16s} {'own max':>16s}  max reached at", file=sys.stderr)
    for k, v in last["at_peak"].items():
        print(f"{k:16s} {v:>16,d} {last['max_per_category'].get(k, 0):>16,d}  {last['max_where'].get(k, '')}",
              file=sys.stderr)
    print(f"{'Total':16s} {last['peak_bytes']:>16,d}", file=sys.stderr)
    txt = json.dumps(res, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(txt + "\n")
    print(txt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
