#!/usr/bin/env python3
"""Compare shardcast's predicted memory with PyTorch's FSDPMemTracker, category by category.

For each row of a matrix (model, sequence length, world size, reshard_after_forward, AC none / full /
torchtitan's per-op SAC, attention, transformers mask behaviour) it runs scripts/torch_peer.py (real FSDP2 training steps under
FakeTensorMode, the tracker around them; see its header) and `shardcast plan --json` for the same
plan, and prints, per category at each side's global peak, the bytes and the relative error, and
whether the category is within 1% or 16 MiB, whichever is larger (issue 11's bar). Runtime
Overhead is left out: the tracker does not count it.

The PyTorch side is an optional dependency, never part of the test suite:
  scripts/validate-memory.py --setup              create the venv (torch, transformers==4.57.6)
  scripts/validate-memory.py                      run the whole matrix
  scripts/validate-memory.py --rows 8b-2k,gpt2-sdpa --layers 4 --out docs/validation-memory.md
Each full-size 8B row took 2 to 9 minutes on 2 shared CPU cores; rows run one at a time.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT / "scripts" / "torch_peer.py"
DEFAULT_VENV = Path(os.environ.get("SHARDCAST_PEER_VENV", Path.home() / ".cache" / "shardcast" / "peer-venv"))
TRANSFORMERS = "transformers==4.57.6"
MIB = 1 << 20

# name: (model file under models/, seq, world, reshard_after_forward, ac, attention)
MATRIX = {
    "8b-2k": ("llama-3.1-8b", 2048, 8, True, "none", "sdpa"),
    "8b-4k": ("llama-3.1-8b", 4096, 8, True, "none", "sdpa"),
    "8b-2k-noreshard": ("llama-3.1-8b", 2048, 8, False, "none", "sdpa"),
    "8b-2k-acfull": ("llama-3.1-8b", 2048, 8, True, "full", "sdpa"),
    "8b-4k-acfull": ("llama-3.1-8b", 4096, 8, True, "full", "sdpa"),
    "8b-2k-w16": ("llama-3.1-8b", 2048, 16, True, "none", "sdpa"),
    "8b-4k-w16-noreshard": ("llama-3.1-8b", 4096, 16, False, "none", "sdpa"),
    "8b-2k-acop": ("llama-3.1-8b", 2048, 8, True, "op", "sdpa"),
    "8b-4k-acop": ("llama-3.1-8b", 4096, 8, True, "op", "sdpa"),
    "8b-2k-acop-w16-noreshard": ("llama-3.1-8b", 2048, 16, False, "op", "sdpa"),
    "l2-7b-4k": ("llama-2-7b", 4096, 8, True, "none", "sdpa"),
    "gpt2-sdpa": ("gpt2", 1024, 8, True, "none", "sdpa"),
    "gpt2-eager": ("gpt2", 1024, 8, True, "none", "eager"),
    # FSDP2 + tensor parallelism (torchtitan's Llama plan, sequence parallel; TP below).
    "8b-2k-tp2": ("llama-3.1-8b", 2048, 8, True, "none", "sdpa"),
    "8b-2k-tp4": ("llama-3.1-8b", 2048, 8, True, "none", "sdpa"),
    "8b-2k-w16-tp2-acfull": ("llama-3.1-8b", 2048, 16, True, "full", "sdpa"),
    "8b-2k-w16-tp4-acfull": ("llama-3.1-8b", 2048, 16, True, "full", "sdpa"),
    "8b-2k-w16-tp4": ("llama-3.1-8b", 2048, 16, True, "none", "sdpa"),
    "8b-2k-w16-tp2-acfull-nosp": ("llama-3.1-8b", 2048, 16, True, "full", "sdpa"),
    # LoRA (PEFT adapters, the base frozen; LORA below).
    "8b-2k-lora16": ("llama-3.1-8b", 2048, 8, True, "none", "sdpa"),
    "8b-2k-lora16-acfull": ("llama-3.1-8b", 2048, 8, True, "full", "sdpa"),
    "8b-4k-w16-lora64-all": ("llama-3.1-8b", 4096, 16, True, "none", "sdpa"),
    "8b-2k-lora16-eager": ("llama-3.1-8b", 2048, 8, True, "none", "eager"),
    "qwen2-7b-2k-lora16": ("qwen2-7b", 2048, 8, True, "none", "sdpa"),
    "qwen2-7b-2k-w16-lora32-all-acfull": ("qwen2-7b", 2048, 16, True, "full", "sdpa"),
    "gpt2-lora8": ("gpt2", 1024, 8, True, "none", "sdpa"),
    # Qwen3 (q_norm and k_norm per head).
    "qwen3-8b-2k": ("qwen3-8b", 2048, 8, True, "none", "sdpa"),
    "qwen3-8b-2k-acfull": ("qwen3-8b", 2048, 8, True, "full", "sdpa"),
    "qwen3-8b-2k-w16-eager": ("qwen3-8b", 2048, 16, True, "none", "eager"),
    "qwen3-8b-2k-lora16": ("qwen3-8b", 2048, 8, True, "none", "sdpa"),
    # OLMo 2 (post-norms, q_norm and k_norm over all heads, fp32 weight multiply).
    "olmo2-7b-2k": ("olmo-2-7b", 2048, 8, True, "none", "sdpa"),
    "olmo2-7b-2k-acfull": ("olmo-2-7b", 2048, 8, True, "full", "sdpa"),
    "olmo2-7b-2k-w16-eager": ("olmo-2-7b", 2048, 16, True, "none", "eager"),
    "olmo2-7b-2k-lora16": ("olmo-2-7b", 2048, 8, True, "none", "sdpa"),
    # Phi-3 (fused qkv_proj and gate_up_proj; Phi-3-mini-4k's sliding window is 2047 tokens).
    "phi3-mini-1k": ("phi-3-mini-4k", 1024, 8, True, "none", "sdpa"),
    "phi3-mini-1k-acfull": ("phi-3-mini-4k", 1024, 8, True, "full", "sdpa"),
    "phi3-mini-1k-w16-eager": ("phi-3-mini-4k", 1024, 16, True, "none", "eager"),
    "phi3-mini-1k-lora16": ("phi-3-mini-4k", 1024, 8, True, "none", "sdpa"),
    # Gemma, Gemma 2 and Mistral (issue 26's families already modelled).
    "gemma-7b-2k": ("gemma-7b", 2048, 8, True, "none", "sdpa"),
    "gemma-7b-2k-acfull": ("gemma-7b", 2048, 8, True, "full", "sdpa"),
    "gemma2-9b-2k": ("gemma-2-9b", 2048, 8, True, "none", "sdpa"),
    "gemma2-9b-2k-w16-acfull": ("gemma-2-9b", 2048, 16, True, "full", "sdpa"),
    "mistral-7b-2k": ("mistral-7b-v0.1", 2048, 8, True, "none", "sdpa"),
    "mistral-7b-2k-w16-lora16": ("mistral-7b-v0.1", 2048, 16, True, "none", "sdpa"),
    # AC full for the families whose rows above have none.
    "mistral-7b-2k-acfull": ("mistral-7b-v0.1", 2048, 8, True, "full", "sdpa"),
    "mistral-7b-4k-w16-acfull": ("mistral-7b-v0.1", 4096, 16, True, "full", "sdpa"),
    # TP without SP where the gated MLP's product backward is the peak: its [tokens, hidden]
    # residual gradient stays whole.
    "mistral-7b-4k-w16-tp2-acfull-nosp": ("mistral-7b-v0.1", 4096, 16, True, "full", "sdpa"),
    "qwen2-7b-2k": ("qwen2-7b", 2048, 8, True, "none", "sdpa"),
    "qwen2-7b-2k-w16-acfull": ("qwen2-7b", 2048, 16, True, "full", "sdpa"),
    "gpt2-sdpa-acfull": ("gpt2", 1024, 8, True, "full", "sdpa"),
    # GPT-2 under tensor parallelism (Megatron-LM's plan; torch_peer.py converts the Conv1D layers to nn.Linear).
    "gpt2-tp2": ("gpt2", 1024, 8, True, "none", "sdpa"),
    "gpt2-tp4": ("gpt2", 1024, 8, True, "none", "sdpa"),
    "gpt2-w16-tp2-acfull": ("gpt2", 1024, 16, True, "full", "sdpa"),
    "gpt2-w16-tp4-acfull": ("gpt2", 1024, 16, True, "full", "sdpa"),
    "gpt2-w16-tp4": ("gpt2", 1024, 16, True, "none", "sdpa"),
    "gpt2-tp2-nosp": ("gpt2", 1024, 8, True, "none", "sdpa"),
    # Mixtral: the peer routes tokens balanced (torch_peer.py patch_moe_balanced_routing), as planned.
    "mixtral-8x7b-4k-w16": ("mixtral-8x7b", 4096, 16, True, "none", "sdpa"),
    "mixtral-8x7b-2k-w16-acfull": ("mixtral-8x7b", 2048, 16, True, "full", "sdpa"),
    # DeepSeek-V3 (MLA, 256 routed experts, balanced routing on the peer); run with --layers (3 dense + MoE).
    # Eager attention: on the CPU, SDPA with q/k heads of 192 and v heads of 128 has no fused kernel
    # and runs the math path in fp32, which a GPU's efficient-attention kernel does not.
    "deepseek-v3-2k-w16-eager": ("deepseek-v3", 2048, 16, True, "none", "eager"),
    "deepseek-v3-2k-w16-eager-acfull": ("deepseek-v3", 2048, 16, True, "full", "eager"),
}

# LoRA rows: `--lora` on both sides (torch_peer: PEFT's LoraConfig, lora_alpha 2 x rank, dropout 0).
ALL_LINEARS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
LORA = {
    "8b-2k-lora16": "16", "8b-2k-lora16-acfull": "16", "8b-4k-w16-lora64-all": "64:" + ALL_LINEARS,
    "8b-2k-lora16-eager": "16", "qwen2-7b-2k-lora16": "16", "qwen2-7b-2k-w16-lora32-all-acfull": "32:" + ALL_LINEARS,
    "gpt2-lora8": "8:c_attn", "qwen3-8b-2k-lora16": "16", "olmo2-7b-2k-lora16": "16", "phi3-mini-1k-lora16": "16:qkv_proj,o_proj", "mistral-7b-2k-w16-lora16": "16",
}

# Tensor-parallel rows: (tp, sequence parallel). Both sides run loss_parallel off (the logits
# all-gathered before the loss): under FakeTensorMode the tracker counts the vocab-sharded DTensor
# logits that loss_parallel keeps at their global size (see docs/validation-memory.md).
TP = {
    "8b-2k-tp2": (2, True), "8b-2k-tp4": (4, True), "8b-2k-w16-tp2-acfull": (2, True),
    "8b-2k-w16-tp4-acfull": (4, True), "8b-2k-w16-tp4": (4, True), "8b-2k-w16-tp2-acfull-nosp": (2, False),
    "gpt2-tp2": (2, True), "gpt2-tp4": (4, True), "gpt2-w16-tp2-acfull": (2, True), "gpt2-w16-tp4-acfull": (4, True),
    "gpt2-w16-tp4": (4, True), "gpt2-tp2-nosp": (2, False), "mistral-7b-4k-w16-tp2-acfull-nosp": (2, False),
}

# Extra arguments of the PyTorch side for a row, and why (printed under its table). On the CPU,
# SDPA with dropout has no fused kernel and runs the math path, which saves the s x s scores; a
# CUDA flash kernel with dropout saves none, which is what shardcast plans (`--attention flash`).
PEER_ARGS = {
    "gpt2-sdpa": (["--attn-dropout", "0"], "peer run with attention dropout 0 (attn_pdrop 0.1 on the CPU runs SDPA's "
                  "math path, which saves s x s scores a CUDA flash kernel does not); residual and embedding "
                  "dropout unchanged"),
}
PEER_ARGS["gpt2-lora8"] = PEER_ARGS["gpt2-sdpa"]
PEER_ARGS["gpt2-sdpa-acfull"] = PEER_ARGS["gpt2-sdpa"]
for _row in ("gpt2-tp2", "gpt2-tp4", "gpt2-w16-tp2-acfull", "gpt2-w16-tp4-acfull", "gpt2-w16-tp4", "gpt2-tp2-nosp"):
    PEER_ARGS[_row] = PEER_ARGS["gpt2-sdpa"]

# FSDPMemTracker's category names (_FSDPRefType values) -> shardcast's (core/base/units.cpp).
CATEGORIES = [
    ("Sharded Param", "Sharded Param"), ("Unsharded Param", "Unsharded Param"), ("Buffer", "Buffer"),
    ("Sharded Grad", "Sharded Grad"), ("Unsharded Grad", "Unsharded Grad"), ("Activation", "Activation"),
    ("Temp", "Temp"), ("All Gather", "All Gather"), ("Reduce Scatter", "Reduce Scatter"),
    ("OptState", "OptState"), ("Inputs", "Inputs"),
]


def setup(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "-q"]
    # The CPU wheel is enough (the tracker runs under FakeTensorMode); fall back to PyPI's.
    if subprocess.run(pip + ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"]).returncode != 0:
        subprocess.run(pip + ["torch"], check=True)
    subprocess.run(pip + [TRANSFORMERS, "peft"], check=True)
    print(f"validate-memory: venv ready at {venv}")


def find_shardcast(given: str) -> str:
    if given:
        return given
    for p in (ROOT / "build" / "bin" / "shardcast", ROOT / "build" / "apps" / "shardcast" / "shardcast"):
        if p.exists():
            return str(p)
    raise SystemExit("validate-memory: no shardcast binary under build/; build it or pass --shardcast")


def run_peer(venv: Path, row, layers: int, hf_mask: str, cache: str, extra: list) -> dict:
    model, seq, world, reshard, ac, attn = row
    cached = None
    if cache:
        suffix = "".join(x.lstrip("-").replace("-", "") for x in extra)
        cached = Path(cache) / f"{model}-s{seq}-w{world}-r{int(reshard)}-{ac}-{attn}-l{layers}-{hf_mask}{suffix}.json"
        if cached.exists():
            return json.loads(cached.read_text())
    cmd = [str(venv / "bin" / "python"), str(PEER), str(ROOT / "models" / f"{model}.json"), "--world", str(world),
           "--seq", str(seq), "--reshard", "true" if reshard else "false", "--ac", ac, "--attn", attn,
           "--hf-unpacked-mask", "skip" if hf_mask == "5.x" else "keep"]
    if layers:
        cmd += ["--layers", str(layers)]
    cmd += extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"torch_peer failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(out.stdout)
    return json.loads(out.stdout)


def tp_args(name: str, peer: bool) -> list:
    if name in LORA:
        return ["--lora", LORA[name]]
    if name not in TP:
        return []
    tp, sp = TP[name]
    if peer:
        return ["--tp", str(tp)] + ([] if sp else ["--no-sp"])
    return ["--tp", str(tp), "--sequence-parallel", "true" if sp else "false", "--loss-parallel", "false"]


def run_shardcast(binary: str, row, layers: int, hf_mask: str, extra: list) -> dict:
    model, seq, world, reshard, ac, attn = row
    cmd = [binary, "plan", "--json", "--model", str(ROOT / "models" / f"{model}.json"), "--gpu", "H100-SXM",
           "--nodes", str(max(1, world // 8)), "--gpus-per-node", str(min(world, 8)), "--strategy", "FULL_SHARD",
           "--fsdp", "2", "--wrap", "block", "--micro-batch", "1", "--seq-len", str(seq),
           "--reshard-after-forward", "true" if reshard else "false", "--ac", ac,
           "--attention", "eager" if attn == "eager" else "flash", "--kernels", "eager", "--hf-mask", hf_mask]
    if layers:
        cmd += ["--scale", f"layers={layers}"]
    cmd += extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0,):
        raise RuntimeError(f"shardcast failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def within(pred: int, ref: int) -> bool:
    return abs(pred - ref) <= max(0.01 * abs(ref), 16 * MIB)


def rel(pred: int, ref: int) -> str:
    if ref == 0:
        return "-" if pred == 0 else "new"
    return f"{100.0 * (pred - ref) / ref:+.2f}%"


def table(name: str, row, layers: int, hf_mask: str, peer: dict, sc: dict, note: str) -> list:
    mem = sc["memory"]
    overhead = mem.get("runtime_overhead_bytes", 0)
    peer_peak = peer["peak_bytes"]
    sc_peak = mem["peak_bytes"] - overhead
    model, seq, world, reshard, ac, attn = row
    lines = [f"### {name}: {model}{f' ({layers} layers)' if layers else ''}, seq {seq}, world {world}, "
             f"reshard_after_forward {str(reshard).lower()}, AC {ac}, {attn}, transformers mask {hf_mask}",
             "",
             f"torch {peer['torch']}, transformers {peer['transformers']}, tracker device {peer['device']}; "
             f"tracker peak at {peer['steps'][-1]['peak_where']}; shardcast peak at {mem['peak_task']}"
             + (f"; {note}" if note else ""),
             "",
             "| category | FSDPMemTracker (B) | shardcast (B) | error (B) | error | within 1% or 16 MiB |",
             "|---|---:|---:|---:|---:|:---:|"]
    bad = 0
    for tcat, scat in CATEGORIES:
        ref = int(peer["at_peak"].get(tcat, 0))
        pred = int(mem["at_peak"].get(scat, 0))
        ok = within(pred, ref)
        bad += not ok
        lines.append(f"| {scat} | {ref:,} | {pred:,} | {pred - ref:+,} | {rel(pred, ref)} | {'yes' if ok else 'NO'} |")
    peak_ok = abs(sc_peak - peer_peak) <= 0.005 * peer_peak
    lines.append(f"| **peak (no Runtime Overhead)** | {peer_peak:,} | {sc_peak:,} | {sc_peak - peer_peak:+,} | "
                 f"{rel(sc_peak, peer_peak)} | {'yes' if peak_ok else 'NO'} (0.5%) |")
    lines.append("")
    lines.append(f"{bad} of {len(CATEGORIES)} categories outside the bar; peak {'within' if peak_ok else 'outside'} 0.5%.")
    lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--setup", action="store_true", help="create the venv with torch and " + TRANSFORMERS)
    ap.add_argument("--venv", default=str(DEFAULT_VENV), help="the PyTorch venv (default %(default)s, "
                    "or $SHARDCAST_PEER_VENV)")
    ap.add_argument("--shardcast", default="", help="the shardcast binary (default: build/bin/shardcast)")
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all): " + ", ".join(MATRIX))
    ap.add_argument("--layers", type=int, default=0, help="blocks on both sides (0: the model's own)")
    ap.add_argument("--hf-mask", default="5.x", choices=["5.x", "4.5x", "both"],
                    help="transformers' mask behaviour on both sides (torch_peer --hf-unpacked-mask skip = 5.x)")
    ap.add_argument("--peer-cache", default="", help="keep each PyTorch result as JSON in this folder and reuse it "
                    "(the tracker's figures do not change with shardcast's code)")
    ap.add_argument("--out", default="", help="also write the tables as Markdown to this file")
    a = ap.parse_args()

    venv = Path(a.venv)
    if a.setup:
        setup(venv)
        return 0
    if not (venv / "bin" / "python").exists():
        raise SystemExit(f"validate-memory: no venv at {venv}; run with --setup first")
    binary = find_shardcast(a.shardcast)
    names = [n for n in a.rows.split(",") if n] or list(MATRIX)
    unknown = [n for n in names if n not in MATRIX]
    if unknown:
        raise SystemExit(f"validate-memory: unknown rows {unknown}; valid: {', '.join(MATRIX)}")
    masks = ["5.x", "4.5x"] if a.hf_mask == "both" else [a.hf_mask]

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Generated by `scripts/validate-memory.py {' '.join(sys.argv[1:])}` on {stamp}.", ""]
    failures = 0
    for name in names:
        for mask in masks:
            row = MATRIX[name]
            try:
                extra, note = PEER_ARGS.get(name, ([], ""))
                peer = run_peer(venv, row, a.layers, mask, a.peer_cache, extra + tp_args(name, True))
                sc = run_shardcast(binary, row, a.layers, mask, tp_args(name, False))
                if name in LORA:
                    note = (note + "; " if note else "") + f"LoRA {LORA[name]} (PEFT, the base frozen)"
                if name in TP:
                    tp, sp = TP[name]
                    note = (note + "; " if note else "") + f"tp {tp} ({'SP' if sp else 'no SP'}), dp {row[2] // tp}, loss_parallel off"
            except RuntimeError as e:
                failures += 1
                lines += [f"### {name} ({mask}): not run", "", "```", str(e)[-1500:], "```", ""]
                print("\n".join(lines[-6:]), flush=True)
                continue
            block = table(name, row, a.layers, mask, peer, sc, note)
            print("\n".join(block), flush=True)
            lines += block
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
