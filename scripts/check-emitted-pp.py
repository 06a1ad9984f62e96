#!/usr/bin/env python3
"""Runs the PyTorch code `shardcast plan --pp P --pytorch FILE` writes, for real, on the CPU: under
torchrun with one process per rank of the plan (gloo), a small HuggingFace Llama is cut into this
rank's pipeline stage (or stages, under Interleaved1F1B), checkpoint-wrapped, tensor-parallelised and
fully_shard-ed as the file says, and one step of the file's schedule (GPipe, 1F1B or
Interleaved1F1B) runs its micro-batches through the stages:
forward, P2P, loss, backward and FSDP's gradient reduction. It fails if the emitted code does not
compose or the step does not run.

  build/bin/shardcast plan --model models/tiny-llama.json --gpu cpu --gpus-per-node 4 --pp 2 --tp 2 \\
      --grad-accum 4 --seq-len 64 --pytorch /tmp/pp.py
  VENV/bin/torchrun --nproc-per-node 4 scripts/check-emitted-pp.py /tmp/pp.py models/tiny-llama.json --seq 64

VENV: scripts/validate-memory.py --setup (torch and transformers); a validation tool, not a test dependency.
"""
import argparse
import json
from contextlib import nullcontext

import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("code", help="the file shardcast plan --pytorch wrote")
    ap.add_argument("config", help="the model's config.json (small: the model is built for real)")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=1)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)  # every rank builds the same model, then keeps its stage
    cfg = json.load(open(a.config))
    cfg.pop("architectures", None)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    code = open(a.code).read()
    code = code.replace('init_device_mesh("cuda"', 'init_device_mesh("cpu"')
    code = code.replace('torch.device("cuda", torch.cuda.current_device())', 'torch.device("cpu")')
    g = {"model": model}
    exec(code, g)
    schedule = g["schedule"]
    n = schedule._n_microbatches
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (n * a.micro_batch, a.seq), generator=gen)
    from torch.distributed.tensor.parallel import loss_parallel
    losses = []
    # Interleaved1F1B: the rank holds several stages; stage 0 is on rank 0, the last on the last rank.
    stage_modules = [st.submod for st in g["stages"]] if "stages" in g else [g["stage_module"]]
    if "stages" in g:
        pp = g["world"]["pp"].size()
        g["is_first"], g["is_last"] = g["pp_rank"] == 0, g["pp_rank"] == pp - 1
    with loss_parallel() if "loss_parallel" in code else nullcontext():
        if g["is_first"]:
            schedule.step(ids)
        elif g["is_last"]:
            schedule.step(target=ids, losses=losses)
        else:
            schedule.step()
    grads = sum(1 for m in stage_modules for p in m.parameters() if p.grad is not None)
    params = sum(1 for m in stage_modules for _ in m.parameters())
    if grads != params:
        raise SystemExit(f"rank {dist.get_rank()}: {params - grads} of {params} parameters got no gradient")
    if g["is_last"]:
        loss = sum(float((l.full_tensor() if hasattr(l, "full_tensor") else l).detach()) for l in losses) / len(losses)
        print(f"rank {dist.get_rank()} (stage {g['pp_rank']}, last): {n} micro-batches ran forward and backward, "
              f"mean loss {loss:.4f}; every parameter of the stage has its gradient", flush=True)
    else:
        print(f"rank {dist.get_rank()} (stage {g['pp_rank']}): {params} parameters, every one with its gradient",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
