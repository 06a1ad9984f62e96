#!/usr/bin/env bash
# End-to-end checks of shardcast's stable command-line interface: JSON output keys, exit codes
# and one-line error messages for bad input, listings, plan write-back, and golden plans.
#   usage: run_cli_tests.sh SHARDCAST_BINARY REPO_ROOT
set -uo pipefail
# shellcheck source=tests/cli/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

bin=${1:?usage: run_cli_tests.sh SHARDCAST_BINARY REPO_ROOT}
root=${2:?usage: run_cli_tests.sh SHARDCAST_BINARY REPO_ROOT}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
root=$(cd "$root" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# --- plan --json: one JSON object with every documented key -----------------------------------
check_keys='
import json, sys
d = json.load(open(sys.argv[1]))
required = {
    "model": ["name", "params", "trainable_params", "layers"],
    "plan": ["strategy", "world_size", "shard_size", "replicate_size", "units", "unit_list", "fsdp", "wrap"],
    "memory": ["capacity_bytes", "peak_bytes", "fits", "headroom", "budget_bytes", "at_peak", "model_states", "max_per_category",
               "runtime_overhead_bytes", "host"],
    "communication": ["all_gather_bytes", "reduce_scatter_bytes", "all_reduce_bytes", "volume_bytes"],
    "training": [],
}
missing = [f"{s}.{k}" for s, keys in required.items() for k in ([] if s not in d else keys) if k not in d[s]]
missing += [s for s in required if s not in d]
if not missing:
    for k in ["params", "grads", "optimizer"]:
        if k not in d["memory"]["model_states"]: missing.append("memory.model_states." + k)
    cats = ["Sharded Param", "Unsharded Param", "Buffer", "Sharded Grad", "Unsharded Grad", "Activation",
            "Temp", "All Gather", "Reduce Scatter", "OptState", "Inputs", "Runtime Overhead"]
    missing += ["memory.at_peak." + c for c in cats if c not in d["memory"]["at_peak"]]
    for u in d["plan"]["unit_list"]:
        missing += ["unit_list[]." + k for k in ["name", "params", "sharded_bytes", "unsharded_bytes",
                                                  "activation_bytes"] if k not in u]
        break
    if d["plan"]["units"] != len(d["plan"]["unit_list"]): missing.append("plan.units == len(unit_list)")
    if sum(d["memory"]["at_peak"].values()) != d["memory"]["peak_bytes"]: missing.append("sum(at_peak) == peak_bytes")
    m = d["memory"]
    if m["budget_bytes"] != int(m["capacity_bytes"] * (1 - m["headroom"])): missing.append("budget = capacity x (1 - headroom)")
    if m["fits"] != (m["peak_bytes"] <= m["budget_bytes"]): missing.append("fits")
    c = d["communication"]
    if c["volume_bytes"] != c["all_gather_bytes"] + c["reduce_scatter_bytes"] + 2 * c["all_reduce_bytes"]:
        missing.append("communication.volume_bytes")
if missing:
    print("missing or inconsistent: " + ", ".join(missing)); sys.exit(1)
'
if "$bin" plan --model llama-3.1-8b --gpu h100-sxm --json >"$tmp/plan.json" 2>"$tmp/err"; then
    if msg=$(python3 -c "$check_keys" "$tmp/plan.json" 2>&1); then
        pass "plan --json has every documented key"
    else
        fail "plan --json has every documented key" "$msg"
    fi
else
    fail "plan --json runs" "stderr: $(head -c 400 "$tmp/err")"
fi

# --- one definition of "fits": the headroom moves the verdict the same way in plan and simulate --
# Llama-3.1-8B at seq 8448 on 8 x H100 peaks at ~77.2 of 79.65 GiB allocated: inside the capacity,
# outside the default 5% budget; its reserved peak (caching allocator model, tensor by tensor) is
# past the capacity (the allocator must free its cache to go on), so with no headroom it is "at
# risk" (allocated fits, reserved does not). The
# 8B example plan (micro-batch 1, AC layer:2) fits on reserved memory too.
fit_of() { python3 -c 'import json,sys; d=json.load(sys.stdin); m=d.get("memory", d); print(m["fits"], m["at_risk"])'; }
big=(--model llama-3.1-8b --seq-len 8448)
if [ "$("$bin" plan "${big[@]}" --json | fit_of)" = "False False" ] \
   && [ "$("$bin" plan "${big[@]}" --headroom 0 --json | fit_of)" = "False True" ] \
   && [ "$("$bin" simulate "${big[@]}" --json | fit_of)" = "False False" ] \
   && [ "$("$bin" simulate "${big[@]}" --headroom 0 --json | fit_of)" = "False True" ] \
   && [ "$("$bin" plan "$root/examples/llama-3.1-8b-8xh100.json" --json | fit_of)" = "True False" ]; then
    pass "plan and simulate judge fit on reserved memory against capacity less --headroom (default 5%)"
else
    fail "plan and simulate judge fit on reserved memory against capacity less --headroom (default 5%)"
fi
"$bin" plan "$root/examples/llama-3.1-8b-8xh100.json" --json >"$tmp/example.json"
check "plan --json: each stream's pool at the allocated peak, in use within reserved, in use summing to the peak" '
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
r = m["reserved"]
at = r["by_stream_at_allocated_peak"]
assert set(at) >= {"compute", "all-gather copy-in", "reduce-scatter"}, at
assert all(0 <= s["allocated_bytes"] <= s["reserved_bytes"] for s in at.values()), at
assert sum(s["allocated_bytes"] for s in at.values()) == r["peak_allocated_bytes"] - m["runtime_overhead_bytes"], at
assert sum(s["reserved_bytes"] for s in at.values()) <= r["peak_reserved_bytes"] - m["runtime_overhead_bytes"], at
' "$tmp/example.json"
at_risk_text=$("$bin" plan "${big[@]}" --headroom 0)
if grep -Eq "=> AT RISK: allocated 77.1[0-9] GiB fits, but (reserved|the caching allocator reaches the GPU)" <<<"$at_risk_text"; then
    pass "text report says a plan whose reserved peak does not fit is at risk"
else
    fail "text report says a plan whose reserved peak does not fit is at risk"
fi
expect_bad_input "plan --headroom 1 is bad input naming the flag" "--headroom" "$bin" plan --model gpt2 --headroom 1
expect_bad_input "simulate --headroom -0.1 is bad input naming the flag" "--headroom" "$bin" simulate --model gpt2 --headroom -0.1

expect_ok "plan text report" "$bin" plan --model gpt2 --gpu A100-40G --gpus-per-node 4 --strategy NO_SHARD
if grep -Eq "fits with [0-9.]+ GiB to spare|does NOT fit: over by [0-9.]+ GiB" "$tmp/out"; then
    pass "text report says whether it fits, in GiB"
else
    fail "text report says whether it fits, in GiB" "$(tail -n 20 "$tmp/out")"
fi
expect_ok "plan --help" "$bin" plan --help
expect_ok "shardcast --help" "$bin" --help

# --- bad input: exit 2 and one line naming the file or flag -----------------------------------
printf '{ "model": "gpt2", \n  oops }\n' >"$tmp/malformed.plan.json"
expect_bad_input "malformed JSON plan file" "malformed\.plan\.json" "$bin" plan "$tmp/malformed.plan.json"

"$bin" plan --model gpt2 --gpu A100-40G --gpus-per-node 4 --write-plan "$tmp/good.plan.json" >/dev/null 2>&1
head -c 40 "$tmp/good.plan.json" >"$tmp/truncated.plan.json"
expect_bad_input "truncated JSON plan file" "truncated\.plan\.json" "$bin" plan "$tmp/truncated.plan.json"

expect_bad_input "missing plan file" "no-such\.plan\.json" "$bin" plan "$tmp/no-such.plan.json"

cat >"$tmp/bogus-config.json" <<'JSON'
{"model_type": "not_a_model", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "intermediate_size": 128, "vocab_size": 1000}
JSON
expect_bad_input "unknown model_type config" "bogus-config\.json" "$bin" plan --model "$tmp/bogus-config.json"

expect_bad_input "world size not divisible by --shard-size" "shard[-_]size" \
    "$bin" plan --model gpt2 --gpus-per-node 8 --shard-size 3
expect_bad_input "--micro-batch 0" "micro[-_]batch" "$bin" plan --model gpt2 --micro-batch 0
# --from-config: a torchtitan TOML as the base, flags over it, how it mapped on stderr; bad configs named.
expect_ok "plan --from-config (torchtitan TOML) --nodes 16 --json exits 0" "$bin" plan \
    --from-config "$root/tests/data/configs/torchtitan-llama3-405b-tp8.toml" --nodes 16 --ac op --json
check "--from-config: the config's fields, --ac from the flag, the mapping on stderr" '
import json, os, sys
d = json.load(open(sys.argv[1]))
assert d["model"]["name"] == "llama-3.1-405b" and d["plan"]["world_size"] == 128, d["plan"]
t = d["training"]
assert t["micro_batch"] == 2 and t["seq_len"] == 8192 and t["kernels"] == "compile" and t["ac"] == "op", t
err = open(os.path.join(os.path.dirname(sys.argv[1]), "err")).read()
assert "tensor_parallel_degree 8 -> --tp 8" in err and "max_norm 1 -> --clip-grad-norm 1" in err, err
assert t["clip_grad_norm"] == 1.0, t
' "$tmp/out"
expect_bad_input "--from-config: shard degree -1 without --nodes" "data_parallel_shard_degree is -1" \
    "$bin" plan --from-config "$root/tests/data/configs/torchtitan-llama3-405b-tp8.toml"
printf '[model]\nflavor = "8B"\n[parallelism]\ntensor_parallel_degre = 2\n' >"$tmp/typo.toml"
expect_bad_input "--from-config: an unknown key is named" "typo\.toml: unknown key parallelism\.tensor_parallel_degre" \
    "$bin" plan --from-config "$tmp/typo.toml" --nodes 1
printf '[model\n' >"$tmp/broken.toml"
expect_bad_input "--from-config: malformed TOML names the line" "broken\.toml: malformed TOML at line 1" \
    "$bin" plan --from-config "$tmp/broken.toml" --nodes 1
expect_bad_input "--from-config with a plan file" "not both" \
    "$bin" plan "$tmp/good.plan.json" --from-config "$root/tests/data/configs/torchtitan-llama3-8b-3d.toml"
# --from-config with accelerate's YAML: --model required beside it.
expect_ok "plan --from-config (accelerate YAML) --model exits 0" "$bin" plan \
    --from-config "$root/tests/data/configs/accelerate-fsdp2-hsdp.yaml" --model llama-3.1-8b --json
check "--from-config accelerate: HSDP 2 x 8, FSDP2, bf16 reductions" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["plan"]["strategy"] == "HYBRID_SHARD" and d["plan"]["shard_size"] == 8 and d["plan"]["world_size"] == 16, d["plan"]
assert d["training"]["reduce_dtype"] == "bf16" and d["training"]["ac"] == "full", d["training"]
' "$tmp/out"
expect_bad_input "--from-config accelerate without --model" "names no model; give --model" \
    "$bin" plan --from-config "$root/tests/data/configs/accelerate-fsdp2-hsdp.yaml"
# --emit torchtitan FILE writes the plan as a torchtitan TOML that --from-config reads back to the same plan.
expect_ok "plan --from-config --emit torchtitan --write-plan exits 0" "$bin" plan \
    --from-config "$root/tests/data/configs/torchtitan-llama3-8b-3d.toml" --emit torchtitan "$tmp/emitted.toml" \
    --write-plan "$tmp/first.plan.json"
expect_ok "plan --from-config (the emitted TOML) --write-plan exits 0" "$bin" plan --from-config "$tmp/emitted.toml" \
    --write-plan "$tmp/second.plan.json"
check "the emitted torchtitan TOML reads back to the same plan" '
import json, os, sys
d = os.path.dirname(sys.argv[1])
a = json.load(open(os.path.join(d, "first.plan.json"))); b = json.load(open(os.path.join(d, "second.plan.json")))
assert a == b, (a, b)
assert a["sharding"]["pp_schedule"] == "Interleaved1F1B" and a["checkpoint"]["mode"] == "sharded", a
' "$tmp/out"
expect_bad_input "--emit of an unknown format" "--emit deepspeed: valid: --emit torchtitan\|accelerate\|hf-trainer FILE" \
    "$bin" plan --model llama-3.1-8b --emit deepspeed "$tmp/a.json"
# --emit accelerate / hf-trainer, read back with --from-config and the flags the format leaves to the script.
expect_ok "plan --emit accelerate exits 0" "$bin" plan --model llama-3.1-8b --fsdp 1 --reduce-dtype bf16 --ac full \
    --micro-batch 2 --write-plan "$tmp/acc.plan.json" --emit accelerate "$tmp/acc.yaml"
expect_ok "plan --from-config the emitted YAML exits 0" "$bin" plan --from-config "$tmp/acc.yaml" --model llama-3.1-8b \
    --micro-batch 2 --write-plan "$tmp/acc.back.json"
check "--emit accelerate: the YAML reads back to the same plan" '
import json, os, sys
d = os.path.dirname(sys.argv[1])
a = json.load(open(os.path.join(d, "acc.plan.json"))); b = json.load(open(os.path.join(d, "acc.back.json")))
assert a == b, (a, b)
' "$tmp/out"
expect_ok "plan --emit hf-trainer exits 0" "$bin" plan --model llama-3.1-8b --fsdp 1 --reduce-dtype bf16 --optimizer adamw-fused \
    --clip-grad-norm 1 --write-plan "$tmp/hf.plan.json" --emit hf-trainer "$tmp/hf.json"
expect_ok "plan --from-config the emitted TrainingArguments JSON exits 0" "$bin" plan --from-config "$tmp/hf.json" \
    --model llama-3.1-8b --write-plan "$tmp/hf.back.json"
check "--emit hf-trainer: the JSON reads back to the same plan; the mapping on stderr" '
import json, os, sys
d = os.path.dirname(sys.argv[1])
a = json.load(open(os.path.join(d, "hf.plan.json"))); b = json.load(open(os.path.join(d, "hf.back.json")))
assert a == b, (a, b)
err = open(os.path.join(d, "err")).read()
assert "optim adamw_torch_fused -> --optimizer adamw-fused" in err, err
' "$tmp/out"
expect_bad_input "--emit hf-trainer of a plan the Trainer cannot express" "--emit hf-trainer: training\.reduce_dtype" \
    "$bin" plan --model llama-3.1-8b --emit hf-trainer "$tmp/x.json"
printf '{"fsdp": "full_shard", "per_device_batch": 2}' >"$tmp/typo-args.json"
expect_bad_input "--from-config: an unknown TrainingArguments key is named" "typo-args\.json: per_device_batch is not a TrainingArguments field" \
    "$bin" plan --from-config "$tmp/typo-args.json" --model gpt2
expect_bad_input "--emit torchtitan of a plan torchtitan cannot express" "--emit torchtitan: sharding\.wrap" \
    "$bin" plan --model llama-3.1-8b --wrap every:2 --emit torchtitan "$tmp/b.toml"
expect_bad_input "--emit torchtitan of a plan that does not clip" "--emit torchtitan: training\.clip_grad_norm is 0" \
    "$bin" plan --model llama-3.1-8b --impl torchtitan --emit torchtitan "$tmp/c.toml"
# LoRA: adapters counted, written and read back; a target that matches nothing named with the valid ones.
expect_ok "plan --lora 16 --json --write-plan exits 0" "$bin" plan --model llama-3.1-8b --seq-len 2048 --lora 16 \
    --write-plan "$tmp/lora.plan.json" --json
check "--lora: 128 adapted modules, 13,631,488 trainable parameters, written to the plan file" '
import json, os, sys
d = json.load(open(sys.argv[1]))
l = d["training"]["lora"]
assert l["rank"] == 16 and l["modules"] == 128 and l["adapter_params"] == 13631488, l
assert l["module_names"] == ["q_proj", "k_proj", "v_proj", "o_proj"], l
assert d["model"]["trainable_params"] == 13631488, d["model"]
p = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), "lora.plan.json")))
assert p["training"]["lora"] == "16", p["training"]
' "$tmp/out"
expect_ok "plan of the written LoRA plan file exits 0" "$bin" plan "$tmp/lora.plan.json"
expect_bad_input "--lora with a target that matches nothing" \
    "--lora: target .nope. matches no linear module of llama-3.1-8b; linear modules: down_proj, gate_proj" \
    "$bin" plan --model llama-3.1-8b --lora 16:q_proj,nope
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["training"]["lora"]="16:q_proj,"; json.dump(p,open(sys.argv[2],"w"))' \
    "$tmp/lora.plan.json" "$tmp/lora-bad.plan.json"
expect_bad_input "a plan file whose training.lora is malformed" "lora-bad.plan.json: training.lora: expected RANK" \
    "$bin" plan "$tmp/lora-bad.plan.json"
expect_bad_input "--emit torchtitan of a LoRA plan" "training.lora is set; torchtitan has no LoRA" \
    "$bin" plan --model llama-3.1-8b --impl torchtitan --clip-grad-norm 1 --lora 8 --emit torchtitan "$tmp/l.toml"
# fp8 all-gather: the Float8Linear weights counted; fp8 on a GPU without fp8 tensor cores refused.
expect_ok "plan --all-gather-dtype fp8 --json exits 0" "$bin" plan --model llama-3.1-8b --all-gather-dtype fp8 --json
check "--all-gather-dtype fp8: 224 Float8Linear weights (7 per block), their amax all-reduce 896 B" '
import json, sys
d = json.load(open(sys.argv[1]))
f = d["training"]["float8"]
assert d["training"]["all_gather_dtype"] == "fp8" and f["weights"] == 224 and f["amax_all_reduce_bytes"] == 896, f
assert d["communication"]["all_gather_bytes"] < 0.55 * 30019690496, d["communication"]
' "$tmp/out"
expect_bad_input "--all-gather-dtype fp4" "--all-gather-dtype: unknown dtype .fp4.; valid: param" \
    "$bin" plan --model llama-3.1-8b --all-gather-dtype fp4
expect_bad_input "--all-gather-dtype fp8 on an A100" "training.all_gather_dtype fp8 .*A100-80G has none" \
    "$bin" plan --model llama-3.1-8b --gpu A100-80G --all-gather-dtype fp8
# Gradient clipping: a bad max_norm named with what is valid; a plan file's value read back.
expect_bad_input "--clip-grad-norm -1" "--clip-grad-norm: -1 is not a max_norm; valid: a number from 0" \
    "$bin" plan --model gpt2 --clip-grad-norm -1
expect_ok "plan 70B on 32 GPUs with --clip-grad-norm --write-plan --json exits 0" "$bin" plan --model llama-3.1-70b \
    --nodes 4 --ac full --clip-grad-norm 0.5 --write-plan "$tmp/clip.plan.json" --json
check "--json: init materialised on the GPU is out of memory, on the meta device it fits; clip read back" '
import json, sys
d = json.load(open(sys.argv[1]))
l = d["lifecycle"]
assert l["init_meta_fits"] and not l["init_materialized_fits"] and not l["summon_fits"] and l["summon_offload_fits"], l
assert l["stage_param_bytes"] == 282214825984, l
assert d["training"]["clip_grad_norm"] == 0.5, d["training"]
' "$tmp/out"
expect_ok "the written plan with clip_grad_norm reads back" "$bin" plan "$tmp/clip.plan.json" --json
check "plan file: training.clip_grad_norm kept" '
import json, sys
assert json.load(open(sys.argv[1]))["training"]["clip_grad_norm"] == 0.5
' "$tmp/out"
# Checkpoints: bad values named; a full save of 70B on 32 H100s without offload_to_cpu is out of memory
# on rank 0 (the report says so, in text and --json), with offload_to_cpu it fits.
expect_bad_input "--checkpoint-every 0" "--checkpoint-every 0" "$bin" plan --model gpt2 --checkpoint full --checkpoint-every 0
expect_bad_input "--checkpoint dcp" "--checkpoint: unknown mode 'dcp'; valid: none, full, sharded" \
    "$bin" plan --model gpt2 --checkpoint dcp
expect_bad_input "a sharded save with offload_to_cpu" "checkpoint\.offload_to_cpu" \
    "$bin" plan --model gpt2 --checkpoint sharded --checkpoint-offload-to-cpu true
expect_ok "plan --checkpoint full (70B on 32 H100s) exits 0" "$bin" plan --model llama-3.1-70b --nodes 4 --ac full \
    --allocator expandable --checkpoint full
check "the full save without offload_to_cpu is out of memory on rank 0" '
import sys
t = open(sys.argv[1]).read()
assert "Checkpoint (full save every 500 steps, offload_to_cpu false, rank0_only false)" in t, t
assert "OUT OF MEMORY during the save" in t and "--checkpoint-offload-to-cpu true" in t, t
' "$tmp/out"
expect_ok "plan --checkpoint full --checkpoint-offload-to-cpu true --json exits 0" "$bin" plan --model llama-3.1-70b \
    --nodes 4 --ac full --allocator expandable --checkpoint full --checkpoint-offload-to-cpu true --json
check "--json: the checkpoint's figures; with offload_to_cpu rank 0 fits" '
import json, sys
c = json.load(open(sys.argv[1]))["checkpoint"]
assert c["mode"] == "full" and c["offload_to_cpu"] and c["rank0_fits"], c
assert c["model_bytes"] == 70553706496 * 4 and c["optimizer_bytes"] == 70553706496 * 8, c
assert c["save_s"] > c["write_s"] > 0 and 0 < c["goodput"] <= c["best_goodput"] < 1, c
' "$tmp/out"
# Tensor parallelism: the mesh line, and meshes that cannot be built (exit 2 with the valid choices).
expect_ok "plan --tp 2 reports the mesh" "$bin" plan --model llama-3.1-8b --tp 2 --seq-len 2048
if grep -q "mesh         dp_replicate 1 x dp_shard 4 x tp 2" "$tmp/out" && grep -q "tensor parallel" "$tmp/out"; then
    pass "plan --tp 2: mesh and tensor-parallel time in the report"
else
    fail "plan --tp 2: mesh and tensor-parallel time in the report" "$(head -n 12 "$tmp/out")"
fi
expect_bad_input "--tp 3 names the valid degrees" "valid: 1, 2, 4, 8" "$bin" plan --model llama-3.1-8b --tp 3
expect_bad_input "--tp 16 on 16 GPUs per node: KV heads" "key-value heads" \
    "$bin" plan --model llama-3.1-8b --gpus-per-node 16 --tp 16
expect_bad_input "--tp 2 on phi-3: no TP plan" "no tensor-parallel plan" "$bin" plan --model phi-3-mini-4k --tp 2
expect_bad_input "--tp 8 on gpt2: 12 heads" "must divide the attention heads \\(12\\).*valid: 1, 2, 4" "$bin" plan --model gpt2 --tp 8
expect_bad_input "--pp above the blocks plus embedding and output" "valid: 1 to 14" "$bin" plan --model llama-3.1-8b --scale layers=12 --nodes 2 --pp 16 --grad-accum 16
expect_bad_input "--pp not dividing the world" "must divide the world size 8" "$bin" plan --model llama-3.1-8b --pp 3 --grad-accum 3
expect_bad_input "--pp 1F1B with fewer micro-batches" "training.grad_accum 2 < pp 4" "$bin" plan --model llama-3.1-8b --pp 4 --grad-accum 2
expect_bad_input "--pp with tied embeddings" "tied embeddings" "$bin" plan --model gpt2 --pp 2 --grad-accum 2
expect_bad_input "--pp-schedule Interleaved1F1B without virtual stages" "needs sharding.pp_virtual_stages 2 or more" "$bin" plan --model llama-3.1-8b --pp 2 --grad-accum 2 --pp-schedule Interleaved1F1B
expect_bad_input "--pp-virtual-stages without Interleaved1F1B" "needs sharding.pp_schedule Interleaved1F1B" "$bin" plan --model llama-3.1-8b --pp 2 --grad-accum 2 --pp-virtual-stages 2
expect_bad_input "--pp-virtual-stages 0 names the flag" "--pp-virtual-stages" "$bin" plan --model llama-3.1-8b --pp 2 --pp-virtual-stages 0
expect_bad_input "Interleaved1F1B micro-batches not a multiple of its rounds" "valid near it: 7, 8, 10, 12" "$bin" plan --model llama-3.1-8b --nodes 2 --pp 4 --grad-accum 9 --pp-schedule Interleaved1F1B --pp-virtual-stages 2
expect_bad_input "--pp-schedule bogus" "expected one of GPipe, 1F1B, Interleaved1F1B" "$bin" plan --model llama-3.1-8b --pp 2 --pp-schedule bogus
expect_bad_input "--pp-stage-blocks not summing" "sum to the model's 32 blocks" "$bin" plan --model llama-3.1-8b --pp 2 --grad-accum 2 --pp-stage-blocks 16,15
expect_bad_input "--pp-stage-blocks malformed" "separated by commas" "$bin" plan --model llama-3.1-8b --pp 2 --pp-stage-blocks 16,,16
expect_bad_input "--cp 2 is refused" "context parallelism" "$bin" plan --model gpt2 --cp 2
expect_bad_input "--tp 0 names the flag" "--tp" "$bin" plan --model llama-3.1-8b --tp 0
expect_bad_input "--sequence-parallel maybe" "--sequence-parallel" "$bin" plan --model llama-3.1-8b --tp 2 --sequence-parallel maybe
"$bin" plan --model llama-3.1-8b --tp 2 --seq-len 2048 --write-plan "$tmp/tp2.plan.json" >/dev/null 2>&1
if grep -q '"tp": 2' "$tmp/tp2.plan.json"; then pass "--write-plan keeps tp"; else fail "--write-plan keeps tp" "$(cat "$tmp/tp2.plan.json")"; fi
# Pipeline stages: the report's mesh line and pipeline table, and the plan file keeps the schedule.
expect_ok "plan --pp 4 1F1B" "$bin" plan --model llama-3.1-8b --nodes 2 --pp 4 --grad-accum 8 --seq-len 4096 \
    --write-plan "$tmp/pp4.plan.json"
if grep -q "^  mesh         pp 4 x dp_replicate 1 x dp_shard 4 x tp 1" "$tmp/out" &&
    grep -q "^Pipeline (4 stages, schedule 1F1B, 8 micro-batches" "$tmp/out" &&
    grep -Eq "^  0 +8 +4 " "$tmp/out" && grep -Eq "^  3 +7 +1 " "$tmp/out"; then
    pass "plan --pp 4 reports the mesh and each stage's blocks and micro-batches held"
else
    fail "plan --pp 4 reports the mesh and each stage's blocks and micro-batches held" "$(cat "$tmp/out")"
fi
expect_ok "plan --pp 2 Interleaved1F1B" "$bin" plan --model llama-3.1-8b --nodes 2 --pp 2 --pp-schedule Interleaved1F1B \
    --pp-virtual-stages 2 --grad-accum 8 --seq-len 4096 --write-plan "$tmp/ilv.plan.json"
if grep -q "^Pipeline (2 ranks x 2 stages each = 4 stages, schedule Interleaved1F1B, 8 micro-batches" "$tmp/out" &&
    grep -q "rank r holds stages r and r + 2" "$tmp/out" && grep -Eq "^  0 +16 +5 " "$tmp/out" &&
    grep -q '"pp_virtual_stages": 2' "$tmp/ilv.plan.json"; then
    pass "plan --pp-virtual-stages 2 reports each rank's stages and keeps them in the plan file"
else
    fail "plan --pp-virtual-stages 2 reports each rank's stages and keeps them in the plan file" "$(cat "$tmp/out")"
fi
expect_ok "plan --pp 4 --stage 3" "$bin" plan --model llama-3.1-8b --nodes 2 --pp 4 --grad-accum 8 --seq-len 4096 --stage 3
if grep -q "memory and timeline below: stage 3" "$tmp/out"; then pass "plan --stage 3 shows stage 3"; else fail "plan --stage 3 shows stage 3" "$(head -c 600 "$tmp/out")"; fi
expect_bad_input "plan --stage past the stages" "--stage 4: the plan has 4 pipeline stages .valid: 0 to 3." \
    "$bin" plan --model llama-3.1-8b --nodes 2 --pp 4 --grad-accum 8 --stage 4
if grep -q '"pp_schedule": "1F1B"' "$tmp/pp4.plan.json" && grep -q '"pp": 4' "$tmp/pp4.plan.json"; then
    pass "--write-plan keeps pp"
else
    fail "--write-plan keeps pp" "$(cat "$tmp/pp4.plan.json")"
fi
expect_ok "optimize --pp 1,2" "$bin" optimize --model llama-3.1-8b --scale layers=4 --seq-len 2048 --global-batch 16 --pp 1,2
if grep -q "^  pp  *2 instead of 1: " "$tmp/out"; then pass "optimize --pp prices the other stage count"; else fail "optimize --pp prices the other stage count" "$(cat "$tmp/out")"; fi
expect_bad_input "optimize --pp 3 names the world" "--pp 3: .*must divide the world size 8" \
    "$bin" optimize --model llama-3.1-8b --global-batch 16 --pp 1,3
expect_bad_input "optimize --tp 3 names the valid degrees" "--tp 3: .*valid: 1, 2, 4, 8" \
    "$bin" optimize --model llama-3.1-8b --global-batch 16 --tp 1,3
# The issue's job: Llama-3.1-405B on 16,384 H100s, 2,048 x 8,192 tokens; only tp 8 gives whole sequences.
expect_ok "optimize 405B on 16384 GPUs with --tp 1,2,4,8" \
    "$bin" optimize --model llama-3.1-405b --nodes 2048 --seq-len 8192 --global-batch 2048 --tp 1,2,4,8
if grep -q "^Best: .*, tp 8$" "$tmp/out" && grep -q "tp 1: --global-batch 2048 does not split" "$tmp/out"; then
    pass "optimize picks tp 8 for 405B on 16384 GPUs and says why tp 1 is left out"
else
    fail "optimize picks tp 8 for 405B on 16384 GPUs and says why tp 1 is left out" "$(head -n 8 "$tmp/out")"
fi

printf '# wrap units\nmodel.layers.0\nmodel.layers.999\n' >"$tmp/units.txt"
expect_bad_input "unknown module in a modules: wrap file" "units\.txt|model\.layers\.999" \
    "$bin" plan --model llama-3.1-8b --wrap "modules:$tmp/units.txt"

expect_bad_input "unknown GPU" "--gpu|NOPE-GPU" "$bin" plan --model gpt2 --gpu NOPE-GPU
expect_bad_input "unknown strategy" "--strategy" "$bin" plan --model gpt2 --strategy ZERO9
expect_bad_input "unknown model name" "no-such-model" "$bin" plan --model no-such-model
expect_bad_input "plan without a plan file or --model" "--model" "$bin" plan
expect_bad_input "unknown flag" "--no-such-flag" "$bin" plan --model gpt2 --no-such-flag
expect_bad_input "non-integer --seq-len" "--seq-len" "$bin" plan --model gpt2 --seq-len abc
expect_bad_input "unknown --param-dtype" "--param-dtype" "$bin" plan --model gpt2 --param-dtype int4
expect_bad_input "no subcommand" "subcommand" "$bin"

# --- listings -------------------------------------------------------------------------------
expect_ok "shardcast models" "$bin" models
missing_models=""
for f in "$root"/models/*.json; do
    name=$(basename "$f" .json)
    grep -q -- "$name" "$tmp/out" || missing_models+=" $name"
done
if [ -z "$missing_models" ]; then pass "models lists every bundled model"; else fail "models lists every bundled model" "missing:$missing_models"; fi

expect_ok "shardcast gpus" "$bin" gpus
missing_gpus=""
for g in A100-40G A100-80G H100-SXM; do grep -q -- "$g" "$tmp/out" || missing_gpus+=" $g"; done
if [ -z "$missing_gpus" ]; then pass "gpus lists the presets"; else fail "gpus lists the presets" "missing:$missing_gpus"; fi

# --- --write-plan, then reading the written plan back, gives the same result ------------------
if "$bin" plan --model llama-3.1-8b --gpu H100-SXM --nodes 2 --gpus-per-node 8 --strategy HYBRID_SHARD \
        --wrap every:2 --micro-batch 2 --seq-len 2048 --grad-accum 4 --no-sync --ac op \
        --optimizer sgd-momentum --reshard-after-forward false --json --write-plan "$tmp/written.plan.json" \
        >"$tmp/first.json" 2>"$tmp/err" &&
    "$bin" plan "$tmp/written.plan.json" --json >"$tmp/second.json" 2>>"$tmp/err"; then
    if cmp -s "$tmp/first.json" "$tmp/second.json"; then
        pass "--write-plan round trip gives the same JSON"
    else
        fail "--write-plan round trip gives the same JSON" "$(diff "$tmp/first.json" "$tmp/second.json" | head -n 20)"
    fi
else
    fail "--write-plan round trip runs" "stderr: $(head -c 400 "$tmp/err")"
fi

# --- "selective" is ambiguous (torchtitan layer:K or op, Megatron attn-core): an error listing the choices
if "$bin" plan --model llama-3.1-8b --ac selective >"$tmp/out" 2>"$tmp/err"; then
    fail "--ac selective is refused" "it ran"
elif grep -q "ambiguous" "$tmp/err" && grep -q "layer:K" "$tmp/err" && grep -q "attn-core" "$tmp/err"; then
    pass "--ac selective is refused with the choices"
else
    fail "--ac selective is refused with the choices" "stderr: $(head -c 400 "$tmp/err")"
fi

# --- prefetch flags: written into the plan, errors name the flag, and they change the timeline ---------
expect_bad_input "--prefetch-depth 0 is refused" "--prefetch-depth: must be an integer from 1 to 1024" \
    "$bin" plan --model llama-3.1-8b --prefetch-depth 0
expect_bad_input "--backward-prefetch bad is refused" "--backward-prefetch: expected pre, post or none" \
    "$bin" plan --model llama-3.1-8b --fsdp 1 --backward-prefetch later
expect_bad_input "--forward-prefetch bad is refused" "--forward-prefetch: expected true or false" \
    "$bin" plan --model llama-3.1-8b --fsdp 1 --forward-prefetch yes
if "$bin" plan --model llama-3.1-8b --fsdp 1 --forward-prefetch true --backward-prefetch post --prefetch-depth 2 \
        --write-plan "$tmp/prefetch.plan.json" >/dev/null 2>"$tmp/err"; then
    check "prefetch flags are written into the plan" '
import json, sys
s = json.load(open(sys.argv[1]))["sharding"]
assert (s["prefetch_depth"], s["forward_prefetch"], s["backward_prefetch"]) == (2, True, "post"), s' "$tmp/prefetch.plan.json"
else
    fail "prefetch flags are written into the plan" "stderr: $(head -c 400 "$tmp/err")"
fi
# FSDP1 without backward prefetch waits for each all-gather in backward: a longer step than BACKWARD_PRE.
if "$bin" simulate --model llama-3.1-8b --fsdp 1 --seq-len 2048 --json >"$tmp/pre.json" 2>"$tmp/err" &&
    "$bin" simulate --model llama-3.1-8b --fsdp 1 --seq-len 2048 --backward-prefetch none --json \
        >"$tmp/none.json" 2>>"$tmp/err"; then
    check "--backward-prefetch none exposes more communication than pre" '
import json, sys
pre = json.load(open(sys.argv[1] + "/pre.json")); none = json.load(open(sys.argv[1] + "/none.json"))
assert none["step_s"] > pre["step_s"], (none["step_s"], pre["step_s"])
assert none["exposed_comm_s"] > pre["exposed_comm_s"], (none["exposed_comm_s"], pre["exposed_comm_s"])' "$tmp"
else
    fail "--backward-prefetch simulate runs" "stderr: $(head -c 400 "$tmp/err")"
fi

# --- golden plans -------------------------------------------------------------------------
compare='
import json, sys
keys = ["model", "plan", "memory", "communication"]
got = json.load(open(sys.argv[1])); want = json.load(open(sys.argv[2]))
diffs = []
def walk(a, b, path):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a: diffs.append(f"{path}.{k}: missing in output")
            elif k not in b: diffs.append(f"{path}.{k}: not in expected file")
            else: walk(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)): walk(x, y, f"{path}[{i}]")
    elif a != b:
        diffs.append(f"{path}: got {json.dumps(a)[:80]}, expected {json.dumps(b)[:80]}")
for k in keys: walk(got.get(k), want.get(k), k)
if diffs:
    print("\n".join(diffs[:15]) + (f"\n... {len(diffs) - 15} more" if len(diffs) > 15 else "")); sys.exit(1)
'
shopt -s nullglob
goldens=("$root"/tests/golden/*.plan.json)
if [ "${#goldens[@]}" -eq 0 ]; then fail "golden plans present" "no tests/golden/*.plan.json"; fi
for plan in "${goldens[@]}"; do
    name=$(basename "$plan" .plan.json)
    expected="$root/tests/golden/$name.expected.json"
    if [ ! -f "$expected" ]; then
        fail "golden $name" "missing $expected (run tests/golden/update.sh)"
        continue
    fi
    if ! "$bin" plan "$plan" --json >"$tmp/golden.json" 2>"$tmp/err"; then
        fail "golden $name" "shardcast plan failed: $(head -c 400 "$tmp/err")"
    elif msg=$(python3 -c "$compare" "$tmp/golden.json" "$expected" 2>&1); then
        pass "golden $name"
    else
        fail "golden $name" "$msg"
    fi
done

finish
