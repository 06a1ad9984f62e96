#!/usr/bin/env python3
"""Shows what torchao's float8 tensor-parallel styles do to one Llama MLP, as rule F8-TP models it
(core/lower/lower_segments.cpp, float8Costs): rank 0 of a fake tp group of 2 on the CPU, the
activations under FakeTensorMode, PrepareFloat8ModuleInput / Float8ColwiseParallel /
Float8RowwiseParallel applied as torchtitan's apply_tp does. It prints every collective with the
dtype of the data it moves and counts the dynamic casts of activations (an amax: aten.abs of a
3-d tensor) per pass.

What rule F8-TP says, and this prints on torch 2.15 with torchao 0.18:
  forward:  1 activation cast, on the sequence shard; all-gather of float8_e4m3fn; reduce-scatter bf16
  backward: the output gradient's all-gather in float8_e5m2; reduce-scatter bf16

A validation tool, not a test dependency:
  VENV/bin/pip install torchao   (VENV: scripts/validate-memory.py --setup, torch 2.15)
  VENV/bin/python scripts/probe-float8-tp.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode
from torchao.float8 import convert_to_float8_training
from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                   PrepareFloat8ModuleInput)

HIDDEN, INTER, TOKENS, TP = 256, 512, 64, 2


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, INTER, bias=False)
        self.w3 = nn.Linear(HIDDEN, INTER, bias=False)
        self.w2 = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(HIDDEN)
        self.mlp = Mlp()

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Log(TorchDispatchMode):
    """Prints each collective (the dtype of the data inside a float8 tensor) and counts activation amaxes."""

    def __init__(self):
        super().__init__()
        self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if t is not None and "c10d_functional" in name and "wait_tensor" not in name:
            data = getattr(t, "_data", t)
            print(f"  {name.split('.')[1]:24s} {str(data.dtype):22s} shard {tuple(t.shape)}")
        if t is not None and name == "aten.abs.default" and t.dim() == 3:
            self.casts += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    dist.init_process_group("fake", rank=0, world_size=TP, store=FakeStore())
    mesh = init_device_mesh("cpu", (TP,))
    block = Block().to(torch.bfloat16)
    convert_to_float8_training(block)
    parallelize_module(block, mesh, {
        "norm": SequenceParallel(),
        "mlp": PrepareFloat8ModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.w1": Float8ColwiseParallel(),
        "mlp.w3": Float8ColwiseParallel(),
        "mlp.w2": Float8RowwiseParallel(output_layouts=Shard(1)),
    })
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.randn(1, TOKENS // TP, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
        for name, run in (("forward", lambda: block(x)), ("backward", None)):
            print(f"{name}:")
            log = Log()
            with log:
                if run is not None:
                    y = run()
                else:
                    y.sum().backward()
            print(f"  activation casts (amax of a 3-d tensor): {log.casts}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
