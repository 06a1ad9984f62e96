#!/usr/bin/env python3
# setup: scripts/validate-memory.py --setup (a venv with torch and transformers==4.57.6)
# usage: VENV/bin/python scripts/torch_peer.py CONFIG.json --world N
#            [--micro-batch B] [--seq S] [--reshard true|false] [--ac none|full|op] [--attn sdpa|eager]
#            [--layers L] [--device auto|cuda|cpu] [--steps K] [--param-dtype bf16|fp32]
#            [--reduce-dtype fp32|bf16] [--hf-unpacked-mask keep|skip] [--dropout-impl auto|native|default]
#            [--attn-dropout P]
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
    ap.add_argument("--no-gc-disable", action="store_true", help="keep Python gc enabled (torchtitan disables it)")
    ap.add_argument("--json", default="", help="also write the result JSON here")
    a = ap.parse_args()

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
    mesh = init_device_mesh(device, (a.world,))  # outside FakeTensorMode, as torchtitan does

    cfg = AutoConfig.from_pretrained(a.config)
    if a.layers:
        cfg.num_hidden_layers = a.layers
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
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32, attn_implementation=a.attn)
        layers = decoder_layers(model)
        for i in range(len(layers)):
            blk = layers[i]
            if a.ac == "full":
                blk = checkpoint_wrapper(blk, preserve_rng_state=False)
                layers[i] = blk
            elif a.ac == "op":
                blk = checkpoint_wrapper(blk, context_fn=sac_context_fn, preserve_rng_state=False)
                layers[i] = blk
            fully_shard(blk, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        model.to_empty(device=device)
        model.train()
        optim = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        ids = torch.randint(0, cfg.vocab_size, (a.micro_batch, a.seq), device=device)
        labels = torch.randint(0, cfg.vocab_size, (a.micro_batch, a.seq), device=device)
        timings["build_s"] = time.time() - t0
        n_params = sum(p.numel() for p in model.parameters())

        fmt = Tracker(model, optim)
        fmt.track_inputs((ids, labels))
        with fmt:
            for it in range(a.steps):
                fmt.reset_peaks()
                t1 = time.time()
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
        other_devs = {str(d): s[TOTAL] for d, s in fmt._peak_mem_snap.items() if str(d) != steps_out[-1]["device"]}

    res = {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "config": a.config, "model_type": cfg.model_type, "layers": cfg.num_hidden_layers,
        "params": n_params, "world": a.world, "micro_batch": a.micro_batch, "seq": a.seq,
        "reshard_after_forward": reshard, "ac": a.ac, "attn_implementation": a.attn,
        "attention_ops": dict(fmt.attn_ops), "device": device,
        "fake_cuda_error": cuda_err, "dropout_impl": dropout_impl,
        "attn_dropout": {f: getattr(cfg, f) for f in attn_dropout_fields}, "hf_unpacked_mask": a.hf_unpacked_mask, "param_dtype": a.param_dtype, "reduce_dtype": a.reduce_dtype,
        "optimizer": "AdamW(foreach=True)", "gc_disabled": not a.no_gc_disable,
        "other_devices_peak_bytes": other_devs,
        "steps": steps_out,
        "peak_bytes": steps_out[-1]["peak_bytes"], "at_peak": steps_out[-1]["at_peak"],
        "max_per_category": steps_out[-1]["max_per_category"],
        "timings": {**timings, "steps_s": [s["wall_s"] for s in steps_out],
                    "process_s": round(time.time() - T_START, 3)},
    }
    # human-readable summary on stderr; the JSON on stdout is the machine-readable result
    last = steps_out[-1]
    print(f"FSDPMemTracker, step {last['step']} (steady state), device {device}, bytes; peak at {last['peak_where']}",
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
