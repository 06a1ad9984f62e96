#!/usr/bin/env python3
# usage: VENV/bin/python scripts/torch_fsdp_trace.py --config CONFIG.json --nproc N --out DIR
#            [--micro-batch B] [--seq S] [--wrap block|model] [--reshard true|false]
#            [--ac none|full] [--fsdp 2|1] [--steps K] [--schedule true|false] [--seed X]
#            [--device cpu|cuda] [--layers L] [--eval-step]
"""Real PyTorch FSDP training steps of a randomly initialised HuggingFace causal LM on the CPU
(gloo, one process per rank), or with --device cuda on GPUs (NCCL, one GPU per rank, bf16 mixed
precision as torchtitan sets it), recorded by torch.profiler. Writes, under --out:

  rank{r}.json.gz  each rank's Chrome trace (ProfilerActivity.CPU, profile_memory, record_shapes)
  plan.json        (rank 0) the shardcast plan of exactly this run; its model is "config.json"
  config.json      (rank 0) a copy of the HuggingFace config the run used
  run.json         (rank 0) command line, versions, world size, options, per-step wall time in ns

Run it once with --nproc N: without torchrun's environment it re-launches itself through
`python -m torch.distributed.run --standalone --nproc_per_node N` with OMP_NUM_THREADS=1.

Per step: model(input_ids=x, labels=x, use_cache=False) (HF computes the loss), `del` of the
output, backward, AdamW(foreach=True).step(), zero_grad(set_to_none=True); the model in train mode
(dropout as the config gives it), SDPA attention. Everything fp32 (no mixed precision).
--fsdp 2: fully_shard on every decoder layer (--wrap block; after checkpoint_wrapper with --ac full)
and on the root, on init_device_mesh("cpu", (N,)). --fsdp 1: FullyShardedDataParallel with a
transformer auto-wrap policy on the decoder layer class (--wrap block), use_orig_params=True.
--device cuda: the model is built on the rank's GPU; FSDP2 with MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), fp32 master weights and AdamW(foreach=True), PyTorch's default on a GPU and what
shardcast's plan models; the profiler records CUDA kernels and copies too.
--layers L: keep the first L decoder layers of the config (a full-width slice of a large model).
--schedule true: schedule(wait=0, warmup=1, active=K-1, repeat=1), prof.step() after each step, so
the trace holds ProfilerStep#1..K-1. --schedule false: the profiler starts before the model is
built and records everything, so the [memory] events' totals are absolute.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.abspath(__file__)
UNSUPPORTED = ".fsdp1-unsupported"


def parse_bool(s):
    v = s.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {s!r}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="HuggingFace config.json")
    p.add_argument("--nproc", type=int, default=2, help="ranks (2-4)")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--wrap", choices=["block", "model"], default="block")
    p.add_argument("--reshard", type=parse_bool, default=True,
                   help="reshard_after_forward of the non-root units")
    p.add_argument("--ac", choices=["none", "full"], default="none")
    p.add_argument("--fsdp", type=int, choices=[1, 2], default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--schedule", type=parse_bool, default=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--layers", type=int, default=0, help="decoder layers kept (0: the config's)")
    p.add_argument("--lora", default="",
                   help="RANK[:MODULES]: PEFT LoRA adapters (lora_alpha 2 x RANK, dropout 0) on the named modules "
                        "(default q_proj,k_proj,v_proj,o_proj), the base frozen; the plan gets training.lora")
    p.add_argument("--eval-step", action="store_true",
                   help="--device cuda: after the steps, one eval forward (model.eval(), torch.no_grad(), labels); "
                        "its torch.cuda.max_memory_allocated() goes into run.json")
    a = p.parse_args(argv)
    if a.device == "cpu" and not 2 <= a.nproc <= 4:
        p.error("--nproc must be 2-4 on the CPU")
    if a.device == "cuda" and a.nproc < 1:
        p.error("--nproc must be at least 1 (one GPU per rank)")
    if a.device == "cuda" and a.fsdp != 2:
        p.error("--device cuda runs FSDP2 only")
    if a.layers < 0:
        p.error("--layers must be 0 (the config's) or positive")
    if a.micro_batch < 1 or a.seq < 1:
        p.error("--micro-batch and --seq must be positive")
    if a.steps < (2 if a.schedule else 1):
        p.error("--steps must be >= 2 with --schedule true (one warm-up step), else >= 1")
    return a


def launch(args, argv):
    """Re-run this file under torch.distributed.run with args.nproc workers."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["SHARDCAST_TRACE_COMMAND"] = shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
    # torchrun's own parser would take --nproc after the script name as an abbreviation of its
    # --nproc-per-node, so the workers get the count from WORLD_SIZE instead
    fwd, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            fwd.append(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={args.nproc}", HERE] + fwd
    print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
    marker = os.path.join(args.out, UNSUPPORTED)
    if os.path.exists(marker):
        os.remove(marker)
    rc = subprocess.call(cmd, env=env)
    if os.path.exists(marker):  # torchrun reports any failed worker as 1
        os.remove(marker)
        return 2
    return rc


def main(argv):
    args = parse_args(argv)
    if "LOCAL_RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return launch(args, argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    args.nproc = int(os.environ["WORLD_SIZE"])
    return worker(args)


# ---------------------------------------------------------------------------------------------
# worker (one per rank, under torchrun)

def decoder_layer_class(model):
    """The decoder layer class: the first of model._no_split_modules that the model holds."""
    names = list(getattr(model, "_no_split_modules", None) or [])
    for name in names:
        for m in model.modules():
            if type(m).__name__ == name:
                return type(m)
    raise SystemExit(f"cannot find the decoder layer class of {type(model).__name__} "
                     f"(_no_split_modules = {names})")


def decoder_layers(model, cls):
    """(parent ModuleList, index, layer) of every decoder layer, in model order."""
    import torch.nn as nn
    out = []
    for parent in model.modules():
        if isinstance(parent, nn.ModuleList):
            for i, child in enumerate(parent):
                if isinstance(child, cls):
                    out.append((parent, i, child))
    return out


def hf_mask_value(transformers_version):
    """shardcast's training.hf_mask for the installed transformers (docs/plan-format.md)."""
    major = int(transformers_version.split(".")[0])
    return "5.x" if major >= 5 else "4.5x"


def make_plan(args, world, transformers_version):
    half = "bf16" if args.device == "cuda" else "fp32"
    return {
        "format": "shardcast-plan", "version": 1,
        "model": "config.json",
        "cluster": {"gpu": "h200" if args.device == "cuda" else "cpu", "nodes": 1, "gpus_per_node": world},
        "training": {"micro_batch": args.micro_batch, "seq_len": args.seq, "grad_accum": 1,
                     "optimizer": "adamw", "param_dtype": half, "reduce_dtype": "fp32",
                     "master_dtype": "fp32", "ac": args.ac, "attention": "flash",
                     "kernels": "eager", "hf_mask": hf_mask_value(transformers_version),
                     **({"lora": args.lora} if args.lora else {})},
        "sharding": {"strategy": "FULL_SHARD" if args.reshard else "SHARD_GRAD_OP",
                     "fsdp": args.fsdp,
                     "wrap": "block" if args.wrap == "block" else "whole"},
    }


def fsdp1_unsupported(args, rank, why):
    """Says that FSDP1 cannot run here; the launcher turns the marker into exit status 2."""
    import torch
    import torch.distributed as dist
    if rank == 0:
        print(f"FSDP1 (FullyShardedDataParallel) cannot run on the CPU with gloo in torch "
              f"{torch.__version__}: {why}", file=sys.stderr)
        open(os.path.join(args.out, UNSUPPORTED), "w").close()
    dist.destroy_process_group()
    return 2


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def worker(args):
    import gzip
    import shutil
    import time

    import torch
    import torch.distributed as dist
    import transformers
    from torch.profiler import ProfilerActivity, profile, schedule
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    os.makedirs(args.out, exist_ok=True)

    if args.fsdp == 1:
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
        except ImportError as e:
            return fsdp1_unsupported(args, rank, f"not available: {e}")

    trace_json = os.path.join(args.out, f"rank{rank}.json")
    trace_gz = trace_json + ".gz"

    def export(prof):
        prof.export_chrome_trace(trace_json)
        with open(trace_json, "rb") as src, open(trace_gz, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as dst:
                shutil.copyfileobj(src, dst)
        os.remove(trace_json)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    prof_kwargs = dict(activities=activities, profile_memory=True,
                       record_shapes=True, with_stack=False)
    if args.schedule:
        prof = profile(schedule=schedule(wait=0, warmup=1, active=args.steps - 1, repeat=1),
                       on_trace_ready=export, **prof_kwargs)
    else:
        prof = profile(**prof_kwargs)
        prof.start()  # before the model is built: memory totals are absolute

    # --- model -----------------------------------------------------------------------------
    torch.manual_seed(args.seed)  # same initial weights on every rank
    config = AutoConfig.from_pretrained(os.path.abspath(args.config))
    config.use_cache = False  # training: no KV cache (a cache also breaks checkpoint recompute)
    if args.layers:
        config.num_hidden_layers = args.layers
        for key in ("layer_types", "mlp_only_layers"):  # per-layer lists follow the layer count
            if isinstance(getattr(config, key, None), list):
                setattr(config, key, getattr(config, key)[:args.layers])
    with device:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                                 dtype=torch.float32)
    model.train()  # dropout as configured
    layer_cls = decoder_layer_class(model)
    if args.lora:  # PEFT puts the adapters into the model in place and freezes the rest
        from peft import LoraConfig, get_peft_model
        rank_text, _, mods = args.lora.partition(":")
        targets = mods.split(",") if mods else ["q_proj", "k_proj", "v_proj", "o_proj"]
        model = get_peft_model(model, LoraConfig(r=int(rank_text), lora_alpha=2 * int(rank_text), lora_dropout=0.0,
                                                 target_modules=targets))
    layers = decoder_layers(model, layer_cls)
    bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
    if bad:
        raise SystemExit(f"non-fp32 parameters: {bad[:3]}")
    n_params = sum(p.numel() for p in model.parameters())

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    if args.ac == "full" and args.fsdp == 2:  # torchtitan: checkpoint_wrapper, then fully_shard
        for parent, i, layer in layers:
            parent[i] = checkpoint_wrapper(layer)

    if args.fsdp == 2:
        from torch.distributed.device_mesh import init_device_mesh
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import fully_shard
        mesh = init_device_mesh(args.device, (world,))
        extra = {}
        if cuda:  # torchtitan's default: bf16 compute and all-gather, fp32 gradient reduction
            try:
                from torch.distributed.fsdp import MixedPrecisionPolicy
            except ImportError:
                from torch.distributed._composable.fsdp import MixedPrecisionPolicy
            extra["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                      reduce_dtype=torch.float32)
        if args.wrap == "block":
            for parent, i, _ in layers:
                fully_shard(parent[i], mesh=mesh, reshard_after_forward=args.reshard, **extra)
        fully_shard(model, mesh=mesh, **extra)
    else:
        import functools
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        policy = None
        if args.wrap == "block":
            policy = functools.partial(transformer_auto_wrap_policy,
                                       transformer_layer_cls={layer_cls})
        strategy = ShardingStrategy.FULL_SHARD if args.reshard else ShardingStrategy.SHARD_GRAD_OP
        try:
            model = FSDP(model, auto_wrap_policy=policy, sharding_strategy=strategy,
                         use_orig_params=True, device_id=torch.device("cpu"))
        except Exception as e:  # FSDP1 refused the CPU
            return fsdp1_unsupported(args, rank, f"{type(e).__name__}: {e}")
        if args.ac == "full":  # FSDP1 recipe: wrap, then checkpoint each layer inside its unit
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
                apply_activation_checkpointing)
            apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper,
                                           check_fn=lambda m: isinstance(m, layer_cls))

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)

    gen = torch.Generator().manual_seed(args.seed + 1 + rank)  # different data per rank
    batches = [torch.randint(0, config.vocab_size, (args.micro_batch, args.seq), generator=gen).to(device)
               for _ in range(args.steps)]

    # --- steps -----------------------------------------------------------------------------
    if args.schedule:
        prof.start()
    step_ns, losses = [], []
    for step in range(args.steps):
        t0 = time.perf_counter_ns()
        x = batches[step]
        out = model(input_ids=x, labels=x, use_cache=False)
        loss = out.loss
        del out
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        step_ns.append(time.perf_counter_ns() - t0)
        losses.append(loss.detach())
        del loss
        if args.schedule:
            prof.step()
    prof.stop()
    train_peak = eval_peak = None
    if cuda:
        train_peak = torch.cuda.max_memory_allocated()
        if args.eval_step:
            # An eval step in the steady state: optimizer state held, gradients None.
            model.eval()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            with torch.no_grad():
                out = model(input_ids=batches[-1], labels=batches[-1], use_cache=False)
                del out
            torch.cuda.synchronize()
            eval_peak = torch.cuda.max_memory_allocated()
            model.train()
    if not args.schedule:
        export(prof)
    elif not os.path.exists(trace_gz):
        raise SystemExit("the profiler schedule did not produce a trace")

    # --- rank 0's files ----------------------------------------------------------------------
    all_ns = [None] * world
    dist.all_gather_object(all_ns, step_ns)
    all_loss = [None] * world
    dist.all_gather_object(all_loss, [float(l) for l in losses])
    if rank == 0:
        with open(args.config) as f:
            hf = json.load(f)
        if args.layers:  # the config this run built
            hf["num_hidden_layers"] = args.layers
            for key in ("layer_types", "mlp_only_layers"):
                if isinstance(hf.get(key), list):
                    hf[key] = hf[key][:args.layers]
        write_json(os.path.join(args.out, "config.json"), hf)
        write_json(os.path.join(args.out, "plan.json"),
                   make_plan(args, world, transformers.__version__))
        opts = {k: v for k, v in vars(args).items()}
        opts["config"] = os.path.relpath(os.path.abspath(args.config))
        opts["out"] = os.path.relpath(os.path.abspath(args.out))
        write_json(os.path.join(args.out, "run.json"), {
            "command": os.environ.get("SHARDCAST_TRACE_COMMAND", shlex.join(sys.argv)),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "world_size": world,
            "options": opts,
            "model_class": type(getattr(model, "module", model)).__name__,
            "decoder_layer_class": layer_cls.__name__,
            "decoder_layers": len(layers),
            "parameters": n_params,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "use_cache": False,
            "profiled_steps": (list(range(1, args.steps)) if args.schedule
                               else list(range(args.steps))),
            "step_wall_ns": step_ns,
            "train_peak_allocated_bytes": train_peak,
            "eval_peak_allocated_bytes": eval_peak,
            "step_wall_ns_per_rank": all_ns,
            "loss_per_rank": all_loss,
        })
        print(f"wrote {args.out}: {world} ranks, {args.steps} steps, step ns {step_ns}",
              file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
