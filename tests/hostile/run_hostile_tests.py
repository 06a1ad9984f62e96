#!/usr/bin/env python3
"""Hostile-input suite (issue 12): bad, huge and absurd inputs through the shardcast CLI.

Each case runs the binary under a 5 s wall-clock limit and a 2 GiB address-space limit
(RLIMIT_AS) and asserts: no signal, the expected exit code (2 for anything the user can fix in
input or paths), a one-line "shardcast: error:" message that names the file, field or flag, and
a bounded message (bad values are quoted as short excerpts).

usage: run_hostile_tests.py SHARDCAST_BIN [--only SUBSTRING] [--keep]
Prints PASS/FAIL per case and exits 1 if any case failed.
"""
import functools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

TIME_LIMIT_S = 5.0
# The time bound catches hangs and runaway work, not slowness: the sanitized Debug builds (ASan +
# UBSan at -O0/-O1) run this tool 10-25x slower than Release (a 405B plan over 64 micro-batches of
# 131,072 tokens: 0.4 s Release, 8.8 s GCC ASan Debug), so they get a proportionally longer bound.
SANITIZED_TIME_FACTOR = 8
MEMORY_LIMIT_BYTES = 2 << 30
MAX_STDERR_CHARS = 1200  # a message, not a dump of the input

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 8,
    "num_hidden_layers": 4, "num_key_value_heads": 4, "vocab_size": 2048,
}
TINY_TREE = {
    "format": "shardcast-module-tree/1", "name": "tiny",
    "modules": [
        {"name": "layers", "container": True},
        {"name": "layers.0", "block": True},
        {"name": "layers.0.fc", "params": [{"name": "weight", "shape": [64, 64]}],
         "ops": [{"name": "fc", "kind": "matmul", "flops_per_token": 8192, "saved_bytes_per_token": 128}]},
    ],
}
GPU = {"base": "H100-SXM"}
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


def with_(base, **changes):
    out = json.loads(json.dumps(base))
    out.update(changes)
    return out


def tree_with(module=None, param=None, op=None, buffer=None):
    t = json.loads(json.dumps(TINY_TREE))
    m = t["modules"][2]
    if module:
        m.update(module)
    if param:
        m["params"][0].update(param)
    if op:
        m["ops"][0].update(op)
    if buffer:
        m["buffers"] = [dict({"name": "b", "numel": 1}, **buffer)]
    return t


def deep(levels, leaf="1"):
    return "[" * levels + leaf + "]" * levels


class Suite:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.tmp = tmp
        self.cases = []

    def file(self, name, content):
        path = os.path.join(self.tmp, name)
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(path, mode) as f:
            if isinstance(content, (dict, list)):
                json.dump(content, f)
            else:
                f.write(content)
        return path

    def case(self, name, args, rc, pattern, check_stdout=None):
        self.cases.append((name, args, rc, pattern, check_stdout))


@functools.lru_cache(maxsize=None)
def is_sanitized(binary):
    """AddressSanitizer reserves terabytes of address space for its shadow, so RLIMIT_AS cannot
    bound a sanitized binary; its own hard_rss_limit_mb bounds the resident memory instead."""
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def limit_resources():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def limit_core_only():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def sanitizer_env(env):
    """The same 2 GiB bound for a sanitized binary: ASan kills it (a signal, so the case fails)
    when its resident memory passes hard_rss_limit_mb."""
    env = dict(env)
    limit = f"hard_rss_limit_mb={MEMORY_LIMIT_BYTES >> 20}"
    env["ASAN_OPTIONS"] = (env["ASAN_OPTIONS"] + ":" + limit) if env.get("ASAN_OPTIONS") else limit
    return env


def run_case(binary, env, case):
    name, args, want_rc, pattern, check_stdout = case
    argv = [binary] + [a if isinstance(a, bytes) else str(a) for a in args]
    start = time.monotonic()
    sanitized = is_sanitized(binary)
    limit_s = TIME_LIMIT_S * (SANITIZED_TIME_FACTOR if sanitized else 1)
    try:
        p = subprocess.run(argv, capture_output=True, timeout=limit_s,
                           preexec_fn=limit_core_only if sanitized else limit_resources,
                           env=sanitizer_env(env) if sanitized else env)
    except subprocess.TimeoutExpired:
        return f"took more than {limit_s} s"
    elapsed = time.monotonic() - start
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0:
        return f"killed by signal {-p.returncode}; stderr: {err[:300]!r}"
    if p.returncode != want_rc:
        return f"exit {p.returncode}, expected {want_rc}; stderr: {err[:300]!r}"
    if elapsed > limit_s:
        return f"took {elapsed:.1f} s"
    if len(err) > MAX_STDERR_CHARS:
        return f"stderr is {len(err)} characters (at most {MAX_STDERR_CHARS}): {err[:200]!r}..."
    if want_rc == 2:
        lines = err.splitlines()
        if len(lines) != 1 or not lines[0].startswith("shardcast: error: "):
            return f"expected one 'shardcast: error:' line, got {err[:300]!r}"
        if "internal error" in err or "json.exception" in err:
            return f"an internal error leaked: {err[:300]!r}"
    if pattern and not re.search(pattern, err):
        return f"stderr does not match /{pattern}/: {err[:300]!r}"
    if check_stdout:
        problem = check_stdout(p.stdout.decode("utf-8", "replace"))
        if problem:
            return problem
    return None


def build_cases(s):
    f = s.file
    plan = lambda *extra: ["plan", *extra]  # noqa: E731
    tiny = f("tiny.json", TINY_LLAMA)
    # Flag values are quoted as bounded excerpts in their errors.
    for flag in ("--optimizer", "--backward-prefetch", "--strategy"):
        s.case(f"100 kB {flag} value: bounded excerpt", plan("--model", tiny, flag, "x" * 100000), 2,
               rf"{flag}: .*'x{{80}}\.\.\.'")

    # 1. Nesting: nlohmann's dump and error paths recurse once per level.
    f("deep-hf.json", '{"model_type": "llama", "hidden_size": ' + deep(100000) + "}")
    s.case("deep value in a HF config", plan("--model", f"{s.tmp}/deep-hf.json"), 2, r"deep-hf\.json.*nest deeper than 64")
    f("deep-gpu.json", '{"base": "H100-SXM", "memory_bytes": ' + deep(100000) + "}")
    s.case("deep value in a GPU file", plan("--model", tiny, "--gpu", f"{s.tmp}/deep-gpu.json"), 2, r"deep-gpu\.json")
    f("deep-profile.json", '{"hbm_efficiency": ' + deep(100000) + "}")
    s.case("deep value in a profile", plan("--model", tiny, "--profile", f"{s.tmp}/deep-profile.json"), 2,
           r"deep-profile\.json.*nest")
    f("deep-plan.json", '{"model": "tiny-llama", "training": {"micro_batch": ' + deep(100000) + "}}")
    s.case("deep value in a plan file", plan(f"{s.tmp}/deep-plan.json"), 2, r"deep-plan\.json.*nest")
    f("deep-tree.json", '{"format": "shardcast-module-tree/1", "modules": ' + deep(100000, "{}") + "}")
    s.case("deep value in a module tree", plan("--model", f"{s.tmp}/deep-tree.json"), 2, r"deep-tree\.json.*nest")
    f("deep-obj.json", '{"a":' * 100000 + "1" + "}" * 100000)
    s.case("deep objects", plan("--model", f"{s.tmp}/deep-obj.json"), 2, r"deep-obj\.json.*line 1")
    f("deep-brackets-in-string.json", json.dumps(with_(TINY_LLAMA, architectures=["[" * 100000])))
    s.case("brackets inside a string do not count as nesting",
           plan("--model", f"{s.tmp}/deep-brackets-in-string.json", "--gpus-per-node", 1), 0, None)
    f("nested-60.json", json.dumps(with_(TINY_LLAMA, hidden_size=json.loads(deep(60)))))
    s.case("60-level array as a dimension: bounded excerpt", plan("--model", f"{s.tmp}/nested-60.json"), 2,
           r"nested-60\.json.*hidden_size")
    f("long-string.json", json.dumps(with_(TINY_LLAMA, hidden_size="x" * 1000000)))
    s.case("1 MB string as a dimension: bounded excerpt", plan("--model", f"{s.tmp}/long-string.json"), 2,
           r"long-string\.json.*hidden_size.*\.\.\.")
    f("big-array.json", json.dumps(with_(TINY_LLAMA, vocab_size=list(range(200000)))))
    s.case("200000-item array as a dimension: described", plan("--model", f"{s.tmp}/big-array.json"), 2,
           r"vocab_size.*an array of 200000 items")

    # 2. Numbers out of range and invalid UTF-8 in JSON.
    f("1e400.json", '{"model_type": "llama", "hidden_size": 1e400}')
    s.case("1e400 in a HF config", plan("--model", f"{s.tmp}/1e400.json"), 2, r"1e400\.json.*out of range")
    f("minus-1e400.json", '{"model_type": "llama", "hidden_size": -1e400}')
    s.case("-1e400 in a HF config", plan("--model", f"{s.tmp}/minus-1e400.json"), 2, r"minus-1e400\.json")
    f("1e400-gpu.json", '{"base": "H100-SXM", "hbm_bytes_per_s": 1e400}')
    s.case("1e400 in a GPU file", plan("--model", tiny, "--gpu", f"{s.tmp}/1e400-gpu.json"), 2, r"1e400-gpu\.json")
    f("1e400-plan.json", '{"model": "tiny-llama", "training": {"seq_len": 1e400}}')
    s.case("1e400 in a plan file", plan(f"{s.tmp}/1e400-plan.json"), 2, r"1e400-plan\.json.*out of range")
    f("1e400-profile.json", '{"hbm_efficiency": 1e400}')
    s.case("1e400 in a profile", plan("--model", tiny, "--profile", f"{s.tmp}/1e400-profile.json"), 2,
           r"1e400-profile\.json")
    f("bad-utf8.json", b'{"model_type": "llama", "name": "\xff\xfe"}')
    s.case("invalid UTF-8 in a JSON string", plan("--model", f"{s.tmp}/bad-utf8.json"), 2, r"bad-utf8\.json.*UTF-8")

    # 3. Duplicate keys would silently take the last value.
    f("dup-hf.json", '{"model_type": "llama", "hidden_size": 256, "hidden_size": 512}')
    s.case("duplicate key in a HF config", plan("--model", f"{s.tmp}/dup-hf.json"), 2,
           r"dup-hf\.json.*duplicate key 'hidden_size'")
    f("dup-plan.json", '{"model": "tiny-llama", "training": {"seq_len": 128, "seq_len": 256}}')
    s.case("duplicate key in a plan file", plan(f"{s.tmp}/dup-plan.json"), 2, r"dup-plan\.json.*duplicate key 'seq_len'")
    f("dup-gpu.json", '{"base": "H100-SXM", "memory_gib": 80, "memory_gib": 40}')
    s.case("duplicate key in a GPU file", plan("--model", tiny, "--gpu", f"{s.tmp}/dup-gpu.json"), 2,
           r"dup-gpu\.json.*duplicate key 'memory_gib'")
    f("dup-profile.json", '{"hbm_efficiency": 0.8, "hbm_efficiency": 0.9}')
    s.case("duplicate key in a profile", plan("--model", tiny, "--profile", f"{s.tmp}/dup-profile.json"), 2,
           r"dup-profile\.json.*duplicate key 'hbm_efficiency'")
    f("dup-tree.json", json.dumps(TINY_TREE).replace('"container": true', '"container": true, "container": false'))
    s.case("duplicate key in a module tree", plan("--model", f"{s.tmp}/dup-tree.json"), 2,
           r"dup-tree\.json.*duplicate key 'container'")
    f("dup-top.json", '{"model": "tiny-llama", "model": "gpt2"}')
    s.case("duplicate top-level key in a plan", plan(f"{s.tmp}/dup-top.json"), 2, r"dup-top\.json.*duplicate key 'model'")

    # 4. The frozen pattern: std::regex compiles and matches recursively.
    s.case("--frozen with 20000 nested groups", plan("--model", tiny, "--frozen", "(" * 20000 + ")" * 20000), 2,
           r"--frozen.*at most 1024 bytes")
    s.case("--frozen of 5000 bytes", plan("--model", tiny, "--frozen", "a" * 5000), 2, r"--frozen.*1024 bytes")
    s.case("--frozen nested 17 deep", plan("--model", tiny, "--frozen", "(" * 17 + "a" + ")" * 17), 2,
           r"--frozen.*nest at most 16")
    s.case("--frozen not UTF-8", plan("--model", tiny, "--frozen", b"\xff\xfe"), 2, r"--frozen.*UTF-8")
    s.case("--frozen invalid", plan("--model", tiny, "--frozen", "(a"), 2, r"--frozen.*invalid regular expression")
    f("frozen-plan.json", {"model": "tiny-llama", "training": {"frozen": "(" * 40 + ")" * 40}})
    s.case("training.frozen nested 40 deep", plan(f"{s.tmp}/frozen-plan.json"), 2, r"training\.frozen.*nest")
    s.case("--frozen escaped parentheses do not nest",
           plan("--model", tiny, "--gpus-per-node", 1, "--frozen", "\\(" * 40 + "embed"), 0, None)

    # Activation checkpointing per block: runs that must cover the model's 4 blocks, bounded messages.
    for spec, pattern in [
            ("blocks:full*1,none*2", r"--ac: 'blocks:full\*1,none\*2' covers 3 blocks but the model has 4"),
            ("blocks:full*5", r"--ac: .*covers 5 blocks but the model has 4"),
            ("blocks:full*0,none*4", r"--ac: .*'full\*0': the count must be an integer from 1 to"),
            ("blocks:none*-4", r"--ac: .*the count must be an integer from 1 to"),
            ("blocks:full*18446744073709551616", r"--ac: .*the count must be an integer from 1 to"),
            ("blocks:layer*4", r"--ac: .*a block's mode is none, op or full"),
            ("blocks:", r"--ac: .*at least one run"),
            ("blocks:full*4,", r"--ac: .*is not MODE\*N"),
            ("blocks", r"--ac: .*blocks needs its runs"),
            ("blocks:" + "full*1," * 15000 + "none*1", r"--ac: .*covers 15001 blocks but the model has 4"),
            ("blocks:" + "x" * 100000 + "*1", r"--ac: .*none, op or full")]:
        s.case(f"--ac {spec[:40]}", plan("--model", tiny, "--ac", spec), 2, pattern)
    s.case("--ac blocks covering every block", plan("--model", tiny, "--ac", "blocks:full*1,op*1,none*2"), 0, None)
    f("ac-plan.json", {"model": "tiny.json", "training": {"ac": "blocks:full*2,none*1"}})
    s.case("training.ac blocks short of the model", plan(f"{s.tmp}/ac-plan.json"), 2,
           r"ac-plan\.json: training\.ac: .*covers 3 blocks but the model has 4")
    s.case("optimize --ac blocks short of the model",
           ["optimize", "--model", tiny, "--global-batch", 8, "--ac", "none,blocks:full*1,none*1"], 2,
           r"--ac: 'blocks:full\*1,none\*1' covers 2 blocks but the model has 4")

    # 5. Module trees: names, shapes, per-token figures.
    f("dots.json", tree_with(module={"name": ".".join(["a"] * 50000)}))
    s.case("module name of 50000 dotted parts", plan("--model", f"{s.tmp}/dots.json"), 2, r"dots\.json.*(bytes|dotted parts)")
    f("dots-65.json", tree_with(module={"name": ".".join(["a"] * 65)}))
    s.case("module name of 65 dotted parts", plan("--model", f"{s.tmp}/dots-65.json"), 2, r"dots-65\.json.*64 dotted parts")
    f("long-name.json", tree_with(module={"name": "m" * 2000}))
    s.case("module name of 2000 bytes", plan("--model", f"{s.tmp}/long-name.json"), 2, r"long-name\.json.*1024 bytes")
    f("long-param.json", tree_with(param={"name": "w" * 100000}))
    s.case("parameter name of 100000 bytes matched by --frozen",
           plan("--model", f"{s.tmp}/long-param.json", "--frozen", "(w|v)*x"), 2, r"long-param\.json.*1024 bytes")
    f("dim-2p62.json", tree_with(param={"shape": [2**62]}))
    s.case("shape dimension 2^62", plan("--model", f"{s.tmp}/dim-2p62.json"), 2, r"dim-2p62\.json.*shape")
    f("dim-product.json", tree_with(param={"shape": [2**31, 2**31, 2**31]}))
    s.case("shape product beyond int64", plan("--model", f"{s.tmp}/dim-product.json"), 2, r"dim-product\.json.*elements")
    f("dim-uint64.json", tree_with(param={"shape": [UINT64_MAX]}))
    s.case("shape dimension 2^64-1", plan("--model", f"{s.tmp}/dim-uint64.json"), 2, r"dim-uint64\.json.*shape")
    f("rank-9.json", tree_with(param={"shape": [2] * 9}))
    s.case("shape of rank 9", plan("--model", f"{s.tmp}/rank-9.json"), 2, r"rank-9\.json.*8 dimensions")
    f("buffer-huge.json", tree_with(buffer={"numel": INT64_MAX}))
    s.case("buffer numel INT64_MAX", plan("--model", f"{s.tmp}/buffer-huge.json"), 2, r"buffer-huge\.json.*numel")
    f("saved-1e18.json", tree_with(op={"saved_bytes_per_token": 1e18}))
    s.case("10^18 saved bytes per token", plan("--model", f"{s.tmp}/saved-1e18.json"), 2,
           r"saved-1e18\.json.*saved_bytes_per_token")
    f("flops-1e300.json", tree_with(op={"flops_per_token": 1e300}))
    s.case("1e300 FLOPs per token", plan("--model", f"{s.tmp}/flops-1e300.json"), 2, r"flops-1e300\.json.*flops_per_token")
    f("bwd-1e9.json", tree_with(op={"bwd_flops_factor": 1e9}))
    s.case("backward factor 1e9", plan("--model", f"{s.tmp}/bwd-1e9.json"), 2, r"bwd-1e9\.json.*bwd_flops_factor")
    f("seq-flops.json", tree_with(op={"flops_per_token_seq": 1e12}))
    s.case("1e12 FLOPs per token per position", plan("--model", f"{s.tmp}/seq-flops.json"), 2,
           r"seq-flops\.json.*flops_per_token_seq")
    f("tree-work.json", tree_with(op={"flops_per_token": 1e15, "saved_bytes_per_token": 2**40}))
    s.case("module tree whose micro-batch work passes the limit",
           plan("--model", f"{s.tmp}/tree-work.json", "--seq-len", 1 << 20, "--gpus-per-node", 1), 2,
           r"micro_batch x training\.seq_len")

    # 6. HuggingFace config dimensions.
    for field, value, label in [
        ("vocab_size", 2**62, "vocab 2^62"),
        ("hidden_size", 2**40, "hidden 2^40"),
        ("head_dim", 2**40, "head_dim 2^40"),
        ("intermediate_size", 2**50, "intermediate 2^50"),
        ("num_hidden_layers", 10**7, "10^7 layers"),
        ("num_attention_heads", 2**63, "heads 2^63 (unsigned)"),
        ("num_key_value_heads", UINT64_MAX, "kv heads 2^64-1"),
    ]:
        path = f(f"hf-{field}.json", with_(TINY_LLAMA, **{field: value}))
        s.case(f"HF config {label}", plan("--model", path), 2, rf"hf-{field}\.json.*'{field}'.*at most")
    path = f("moe-experts.json", with_(TINY_LLAMA, model_type="mixtral", num_local_experts=10**6))
    s.case("10^6 experts", plan("--model", path), 2, r"moe-experts\.json.*num_local_experts")
    path = f("moe-grid.json", with_(TINY_LLAMA, model_type="mixtral", num_local_experts=1024, num_hidden_layers=1024))
    s.case("1024 layers x 1024 experts", plan("--model", path), 2, r"moe-grid\.json.*num_local_experts.*at most 65536")
    path = f("gpt2-positions.json", {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2,
                                     "vocab_size": 100, "n_positions": 2**40})
    s.case("GPT-2 n_positions 2^40", plan("--model", path), 2, r"gpt2-positions\.json.*n_positions")
    path = f("too-many-params.json", with_(TINY_LLAMA, hidden_size=131072, intermediate_size=1048576,
                                           num_hidden_layers=1024, num_attention_heads=1024, num_key_value_heads=1024))
    s.case("model above 2^42 parameters", plan("--model", path), 2, r"too-many-params\.json.*parameters")

    # 7. Training and cluster sizes.
    s.case("--grad-accum 4097", plan("--model", tiny, "--grad-accum", 4097), 2, r"--grad-accum.*4096")
    s.case("--seq-len 2^25", plan("--model", tiny, "--seq-len", 2**25), 2, r"--seq-len.*16777216")
    s.case("--micro-batch 70000", plan("--model", tiny, "--micro-batch", 70000), 2, r"--micro-batch.*65536")
    s.case("--seq-len 2^63", plan("--model", tiny, "--seq-len", 2**63), 2, r"--seq-len")
    s.case("--nodes 2000000", plan("--model", tiny, "--nodes", 2000000), 2, r"--nodes")
    s.case("--micro-batch x --seq-len above 2^28 tokens",
           plan("--model", tiny, "--micro-batch", 65536, "--seq-len", 8192), 2, r"micro_batch x training\.seq_len")
    s.case("405B micro-batch of 4 x 131072 tokens: work limit",
           plan("--model", "llama-3.1-405b", "--micro-batch", 4, "--seq-len", 131072), 2,
           r"micro_batch x training\.seq_len.*FLOPs")

    def positive_mfu_and_wide_flops(out):
        t = json.loads(out)["time"]
        # Hand figure (torchtitan's convention): per token 6 x 401e9 non-embedding parameters +
        # 12 x 126 layers x 16384 (heads x head_dim) x 131072 = 2.41e12 + 3.25e12 = 5.66e12 FLOPs;
        # x 131072 tokens x 64 micro-batches = 4.74e19, beyond INT64_MAX (9.22e18).
        flops, mfu = t.get("model_flops_per_step"), t.get("mfu")
        if flops is None or not (4.7e19 < flops < 4.8e19):
            return f"model_flops_per_step {flops}, expected about 4.74e19"
        if mfu is None or not (0 < mfu < 1):
            return f"MFU {mfu} not in (0, 1)"
        return None
    s.case("405B, 131072 tokens, 64 micro-batches: FLOPs beyond int64, MFU positive",
           ["plan", "--model", "llama-3.1-405b", "--seq-len", 131072, "--grad-accum", 64, "--json"], 0, None,
           positive_mfu_and_wide_flops)
    s.case("--headroom nan", plan("--model", tiny, "--headroom", "nan"), 2, r"--headroom")
    s.case("--headroom inf", plan("--model", tiny, "--headroom", "inf"), 2, r"--headroom")
    s.case("sweep --headroom nan", ["sweep", "--model", tiny, "--headroom", "nan"], 2, r"--headroom")
    s.case("search --headroom -inf", ["search", "--model", tiny, "--headroom", "-inf"], 2, r"--headroom")
    s.case("simulate --headroom 1e400", ["simulate", "--model", tiny, "--headroom", "1e400"], 2, r"--headroom")

    # 8. GPU files: both ends of every figure.
    for name, value, pattern in [
        ("cuda_context_bytes", UINT64_MAX, r"cuda_context_bytes.*from 0 to"),
        ("memory_gib", 1e300, r"memory_gib.*GiB from"),
        ("memory_bytes", INT64_MAX, r"memory_bytes.*from"),
        ("nvlink_bytes_per_s", 1e-300, r"nvlink_bytes_per_s.*from"),
        ("network_bytes_per_s", 1, r"network_bytes_per_s.*from"),
        ("inter_node_latency_s", 1e300, r"inter_node_latency_s.*from 0 to 1"),
        ("peak_flops_bf16", 1e-300, r"peak_flops_bf16.*from"),
        ("peak_flops_fp8", 1e300, r"peak_flops_fp8.*0 or from"),
        ("nccl_bytes_per_communicator", 2**62, r"nccl_bytes_per_communicator"),
    ]:
        path = f(f"gpu-{name}.json", with_(GPU, **{name: value}))
        s.case(f"GPU file {name} = {value}", plan("--model", tiny, "--gpu", path), 2, rf"gpu-{name}\.json.*{pattern}")

    # 9. Profiles.
    for name, value in [("network_efficiency", 1e-300), ("overlap_compute_slowdown", 1e300),
                        ("task_launch_ns", 9 * 10**18), ("cpu_optimizer_bytes_per_s", 1e-3)]:
        path = f(f"profile-{name}.json", {name: value})
        s.case(f"profile {name} = {value}", plan("--model", tiny, "--profile", path), 2,
               rf"profile-{name}\.json.*{name}.*from")
    path = f("profile-gpus-per-node.json", {"gpus_per_node": 2**32})
    s.case("profile gpus_per_node 2^32", plan("--model", tiny, "--profile", path), 2,
           r"profile-gpus-per-node\.json.*gpus_per_node")
    path = f("profile-gpu-context.json", {"gpu": {"cuda_context_bytes": UINT64_MAX}})
    s.case("profile gpu.cuda_context_bytes 2^64-1", plan("--model", tiny, "--profile", path), 2,
           r"profile-gpu-context\.json.*cuda_context_bytes")
    slow = f("slow-gpu.json", with_(GPU, peak_flops_bf16=1e9, peak_flops_fp32=1e9, peak_flops_fp16=0, peak_flops_tf32=0,
                                     peak_flops_fp8=0))
    path = f("slow-profile.json", {"forward_efficiency_max": 1e-4, "backward_efficiency_max": 1e-4})
    s.case("slowest GPU and profile on 405B: step beyond int64 ns is an error",
           ["simulate", "--model", "llama-3.1-405b", "--seq-len", 8192, "--gpu", slow, "--profile", path], 2,
           r"simulated step may last")

    # 10. Paths and exit codes.
    s.case("a directory as the profile", plan("--model", tiny, "--profile", s.tmp), 2, re.escape(s.tmp))
    s.case("a trace in a missing directory", ["simulate", "--model", tiny, "--gpus-per-node", 1, "--trace",
                                              f"{s.tmp}/no/such/dir/t.json"], 2, r"--trace.*no/such/dir")
    s.case("a plan written to a missing directory", plan("--model", tiny, "--gpus-per-node", 1, "--write-plan",
                                                         f"{s.tmp}/no/such/dir/p.json"), 2, r"--write-plan")
    bad_name = os.path.join(s.tmp.encode(), b"model-\xff.json")
    shutil.copy(tiny, bad_name)
    s.case("--model path not UTF-8", plan("--model", bad_name, "--gpus-per-node", 1, "--json"), 2, r"--model.*UTF-8")
    bad_gpu = os.path.join(s.tmp.encode(), b"gpu-\xff.json")
    with open(bad_gpu, "w") as fh:
        json.dump(GPU, fh)
    s.case("--gpu path not UTF-8", plan("--model", tiny, "--gpu", bad_gpu), 2, r"--gpu.*UTF-8")
    s.case("--wrap modules: path not UTF-8", plan("--model", tiny, "--wrap", b"modules:/tmp/\xff"), 2, r"--wrap")
    f("empty.json", "")
    s.case("an empty model file", plan("--model", f"{s.tmp}/empty.json"), 2, r"empty\.json")
    f("embedded-1e400.json", '{"model": {"name": "m", "config": {"model_type": "llama", "hidden_size": 1e400}}}')
    s.case("1e400 in an embedded model", plan(f"{s.tmp}/embedded-1e400.json"), 2, r"embedded-1e400\.json")
    f("plan-world.json", {"model": "tiny-llama", "cluster": {"nodes": 2**31, "gpus_per_node": 2**31}})
    s.case("plan file nodes x gpus_per_node 2^62", plan(f"{s.tmp}/plan-world.json"), 2, r"plan-world\.json|nodes")
    f("plan-grad-accum.json", {"model": "tiny-llama", "training": {"grad_accum": UINT64_MAX}})
    s.case("plan file grad_accum 2^64-1", plan(f"{s.tmp}/plan-grad-accum.json"), 2, r"plan-grad-accum\.json.*grad_accum")

    trace_cases(s)


TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "traces")


def gzip_of_long_string(path, length):
    """A gzipped trace whose one event's name is `length` bytes of 'x': a few MB on disk, streamed."""
    import zlib
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as out:
        out.write(z.compress(b'{"traceEvents": [{"ph": "X", "name": "'))
        for _ in range(length >> 20):
            out.write(z.compress(chunk))
        out.write(z.compress(b'", "ts": 1}]}'))
        out.write(z.flush())


def trace_cases(s):
    """Hostile torch.profiler traces through import-trace (issue 23): exit 2 naming the file, never a crash."""
    import gzip
    f = s.file
    plan2 = os.path.join(TRACES, "llama-block-2r", "plan.json")
    plan4 = os.path.join(TRACES, "llama-block-noreshard-acfull-4r", "plan.json")
    rank0 = os.path.join(TRACES, "llama-block-2r", "rank0.json.gz")
    rank1 = os.path.join(TRACES, "llama-block-2r", "rank1.json.gz")
    out = os.path.join(s.tmp, "run.json")
    imp = lambda *traces, plan=plan2: ["import-trace", *traces, "--plan", plan, "--out", out]  # noqa: E731
    with open(rank0, "rb") as fh:
        gz = fh.read()
    f("truncated.json.gz", gz[: len(gz) // 2])
    s.case("trace: truncated gzip", imp(f"{s.tmp}/truncated.json.gz"), 2, r"truncated\.json\.gz.*truncated gzip")
    text = gzip.decompress(gz).decode()
    f("truncated.json", text[: len(text) // 2])
    s.case("trace: truncated JSON", imp(f"{s.tmp}/truncated.json"), 2, r"truncated\.json: traceEvents\[\d+\]")
    gzip_of_long_string(os.path.join(s.tmp, "string-2g.json.gz"), 2 << 30)
    s.case("trace: a 2 GiB string (gzipped)", imp(f"{s.tmp}/string-2g.json.gz"), 2,
           r"string-2g\.json\.gz: traceEvents\[0\] is larger than the limit")
    f("deep-trace.json", '{"traceEvents": [{"ph": "X", "args": ' + deep(100000) + "}]}")
    s.case("trace: deep nesting", imp(f"{s.tmp}/deep-trace.json"), 2, r"deep-trace\.json.*nesting deeper than 64")
    f("nan-ts.json", '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}]}')
    s.case("trace: NaN timestamp", imp(f"{s.tmp}/nan-ts.json"), 2, r"nan-ts\.json: traceEvents\[0\]")
    f("negative-ts.json", '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": -5, "dur": 1}]}')
    s.case("trace: negative timestamp", imp(f"{s.tmp}/negative-ts.json"), 2, r"negative-ts\.json.*ts must be a non-negative")
    # Out of order: the same real run with every rank's events reversed imports as the original.
    for r, path in ((0, rank0), (1, rank1)):
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh)
        doc["traceEvents"].reverse()
        f(f"reversed-rank{r}.json", doc)
    s.case("trace: out-of-order events import", imp(f"{s.tmp}/reversed-rank0.json", f"{s.tmp}/reversed-rank1.json"), 0, None,
           check_stdout=lambda o: None if "mapped onto the plan's units: 53, unmapped: 0" in o else f"stdout: {o[:300]!r}")
    s.case("trace: rank files of different runs",
           imp(rank0, os.path.join(TRACES, "gpt2-block-2r", "rank1.json.gz")), 2, r"different runs")
    s.case("trace: world size not the plan's", imp(rank0, rank1, plan=plan4), 2, r"run of 2 ranks .* the plan has 4")
    s.case("trace: the same rank twice", imp(rank0, rank0), 2, r"both rank 0")
    os.makedirs(os.path.join(s.tmp, "no-traces"), exist_ok=True)
    s.case("trace: a directory without traces", imp(f"{s.tmp}/no-traces"), 2, r"no-traces: no trace files")
    f("not-fsdp.json", '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}')
    s.case("trace: no FSDP labels", imp(f"{s.tmp}/not-fsdp.json"), 2, r"not-fsdp\.json: no FSDP labels")
    s.case("trace: import-trace without --plan", ["import-trace", rank0, "--out", out], 2, r"needs --plan")
    s.case("trace: compare --torch-trace with a run file", ["compare", plan2, out, "--torch-trace", rank0], 2,
           r"--torch-trace takes the plan")
    s.case("trace: calibrate --from-trace with --backend", ["calibrate", "--from-trace", rank0, "--plan", plan2, "--out",
                                                            out, "--backend", "cpu"], 2, r"takes no --backend")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    tmp = tempfile.mkdtemp(prefix="shardcast-hostile-")
    env = dict(os.environ)
    env["SHARDCAST_DB"] = os.path.join(tmp, "store.db")
    env.pop("SHARDCAST_MODELS_DIR", None)
    suite = Suite(binary, tmp)
    failed = 0
    try:
        build_cases(suite)
        ran = 0
        for case in suite.cases:
            if only and only not in case[0]:
                continue
            ran += 1
            problem = run_case(binary, env, case)
            if problem:
                failed += 1
                print(f"FAIL  {case[0]}\n      {problem}")
            else:
                print(f"PASS  {case[0]}")
        print(f"hostile inputs: {ran - failed} passed, {failed} failed, {ran} cases")
    finally:
        if "--keep" not in sys.argv:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
