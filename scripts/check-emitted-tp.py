#!/usr/bin/env python3
"""Runs the PyTorch code `shardcast plan --tp T --pytorch FILE` writes on a small HuggingFace Llama or GPT-2, on
the CPU with a fake process group (no GPUs, one process standing for rank 0 of the world): the device mesh,
the TP plan (torchtitan's for Llama, Megatron-LM's for GPT-2), checkpoint_wrapper and fully_shard are applied,
then one forward and backward (under loss_parallel when the plan has it). It fails if the emitted code does not
compose.

  build/bin/shardcast plan --model models/tiny-llama.json --tp 2 --seq-len 64 --gpus-per-node 4 \\
      --pytorch /tmp/tp.py
  VENV/bin/python scripts/check-emitted-tp.py /tmp/tp.py models/tiny-llama.json --world 4 --seq 64
  (the same with models/tiny-gpt2.json)

VENV: scripts/validate-memory.py --setup (torch and transformers); a validation tool, not a test dependency.
"""
import argparse
import json

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("code", help="the file shardcast plan --pytorch wrote")
    ap.add_argument("config", help="the model's config.json (small: the model is built for real)")
    ap.add_argument("--world", type=int, required=True, help="the plan's world size")
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=a.world)
    cfg = json.load(open(a.config))
    cfg.pop("architectures", None)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    code = open(a.code).read().replace('init_device_mesh("cuda"', 'init_device_mesh("cpu"')
    exec(code, {"model": model})
    gpt2 = hasattr(model, "transformer")
    name, w = ("c_attn.weight", model.transformer.h[0].attn.c_attn.weight) if gpt2 else \
        ("q_proj.weight", model.model.layers[0].self_attn.q_proj.weight)
    print(f"{name}:", tuple(w.shape), w.placements, "local", tuple(w.to_local().shape))
    if gpt2 and model.lm_head.weight is not model.transformer.wte.weight:
        raise SystemExit("lm_head.weight is no longer transformer.wte.weight: the tie was lost")
    ids = torch.randint(0, model.config.vocab_size, (1, a.seq))
    from contextlib import nullcontext
    from torch.distributed.tensor.parallel import loss_parallel
    ctx = loss_parallel() if "loss_parallel" in code else nullcontext()
    with ctx:
        out = model(input_ids=ids, labels=ids, use_cache=False)  # as training does (no KV cache)
        out.loss.backward()
    loss = out.loss.full_tensor() if isinstance(out.loss, DTensor) else out.loss
    print(f"forward and backward ran: loss {float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
