#!/usr/bin/env python3
"""Compare shardcast's predictions with real PyTorch FSDP runs on this CPU (gloo), before and after
calibrating on one of them.

For each configuration it makes a real run with scripts/torch_fsdp_trace.py (--schedule false, so
the [memory] totals are absolute; --steps 5, so the median of steps 1-4, all steady, is compared), then
runs `shardcast compare PLAN --torch-trace DIR --json` and prints step time, peak memory, the
worst per-unit forward/backward error and the unmapped FSDP events. When `shardcast calibrate` has
--from-trace, it fits a profile on `cal` and compares every config again with --profile. It
reports; it does not judge: exit 0 whatever the errors, 1 when a run or a command failed, 2 when
the venv is missing.

The PyTorch side is an optional dependency, never part of the test suite:
  scripts/validate-traces.py --setup                  create .venv-torch (torch, transformers==4.57.6)
  scripts/validate-traces.py                          run every config (skips those already traced)
  scripts/validate-traces.py --venv /work/venv-trace --configs cal,gpt2 --rerun --doc docs/validation-traces.md
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACER = ROOT / "scripts" / "torch_fsdp_trace.py"
TRANSFORMERS = "transformers==4.57.6"
MIB = 1 << 20
BASE = {"config": "models/tiny-llama.json", "nproc": 2, "wrap": "block", "reshard": "true",
        "ac": "none", "seq": 128, "micro-batch": 2, "fsdp": 2}
# name: what differs from BASE; `cal` is the calibration config, the others are held out
CONFIGS = {
    "cal": {},
    "seq256": {"seq": 256},
    "mb4": {"micro-batch": 4},
    "whole": {"wrap": "model"},
    "noreshard": {"reshard": "false"},
    "4ranks": {"nproc": 4},
    "acfull": {"ac": "full"},
    "gpt2": {"config": "models/tiny-gpt2.json"},
    "fsdp1": {"fsdp": 1},
}
HEADERS = ["config", "ranks", "step meas. (ms)", "step pred. (ms)", "step err (%)",
           "peak meas. (MiB)", "peak pred. (MiB)", "peak err (%)", "worst unit fwd / bwd err (%)",
           "worst block fwd / bwd err (%)", "unmapped"]


def sh(cmd):
    return shlex.join(str(c) for c in cmd)


def run(cmd, log, **kw):
    """Run cmd, echoing it; returns (rc, stdout, seconds)."""
    log.append(sh(cmd))
    print("+ " + sh(cmd), file=sys.stderr, flush=True)
    t = time.monotonic()
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, text=True, **kw)
    return p.returncode, p.stdout, time.monotonic() - t


def shardcast(binary):
    """The binary path; waits up to a minute while someone else rebuilds it."""
    for _ in range(30):
        if binary.exists():
            return binary
        time.sleep(2)
    sys.exit(f"{binary} does not exist (build shardcast first, or pass --shardcast)")


def has_flag(binary, command, flag):
    p = subprocess.run([str(shardcast(binary)), command, "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return flag in p.stdout


def setup(venv):
    if (venv / "bin" / "python").exists():
        print(f"{venv} exists")
        return 0
    subprocess.check_call([sys.executable, "-m", "venv", str(venv)])
    return subprocess.call([str(venv / "bin" / "pip"), "install", "torch", TRANSFORMERS])


def traced(d, nproc):
    return (d / "run.json").exists() and (d / "plan.json").exists() and \
        all((d / f"rank{r}.json.gz").exists() for r in range(nproc))


def trace(python, name, d, rerun, log):
    """Make the real run of config `name` in d unless it is there; returns (ok, seconds or None)."""
    opts = dict(BASE, **CONFIGS[name])
    if traced(d, opts["nproc"]) and not rerun:
        print(f"{name}: traces exist in {d}, not re-run (--rerun to re-run)", file=sys.stderr)
        return True, None
    d.mkdir(parents=True, exist_ok=True)
    for f in d.glob("rank*.json.gz"):
        f.unlink()
    cmd = [python, TRACER.relative_to(ROOT)] + \
        [x for k, v in opts.items() for x in (f"--{k}", v)] + \
        ["--schedule", "false", "--steps", 5, "--out", d]
    rc, _, secs = run(cmd, [], cwd=ROOT)
    return rc == 0 and traced(d, opts["nproc"]), secs


def worst(unit_rows, words):
    """The per-unit error of largest magnitude among keys naming one of `words` and 'error'."""
    found = []
    for u in unit_rows or []:
        for k, v in (u.items() if isinstance(u, dict) else []):
            k = k.lower()
            if not any(w in k for w in words):
                continue
            if isinstance(v, dict):
                v = v.get("error")
            elif "err" not in k:
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                found.append(v)
    return max(found, key=abs) if found else None


def unmapped(j):
    u = j.get("import", {}).get("unmapped_events", j.get("unmapped_events"))
    if isinstance(u, dict):
        return sum(v if isinstance(v, int) else 1 for v in u.values())
    return len(u) if isinstance(u, list) else None


def compare(binary, d, profile, log):
    """compare --json of the traces in d; returns (row values or None, findings)."""
    cmd = [shardcast(binary), "compare", d / "plan.json", "--torch-trace", d, "--json"]
    if profile:
        cmd += ["--profile", profile]
    rc, out, _ = run(cmd, log)
    if rc != 0:
        return None, []
    j = json.loads(out)
    units = j.get("units")
    # The blocks: every unit but the root (whose forward also holds the model's own code around
    # the blocks: embedding, masks, head and loss).
    blocks = [u for u in units or [] if not (isinstance(u, dict) and u.get("unit") == "(root)")]
    row = {"ranks": j.get("world_size"),
           "step_m": j.get("measured_step_ns"), "step_p": j.get("predicted_step_ns"),
           "step_e": j.get("step_time_error"),
           "peak_m": j.get("measured_peak_bytes"), "peak_p": j.get("predicted_peak_bytes"),
           "peak_e": j.get("peak_memory_error"),
           "fwd": worst(units, ("forward", "fwd")) if units is not None else None,
           "bwd": worst(units, ("backward", "bwd")) if units is not None else None,
           "block_fwd": worst(blocks, ("forward", "fwd")) if units is not None else None,
           "block_bwd": worst(blocks, ("backward", "bwd")) if units is not None else None,
           "has_units": units is not None, "unmapped": unmapped(j)}
    findings = j.get("findings") or []
    return row, [f if isinstance(f, str) else
                 f.get("message") or f.get("text") or json.dumps(f, sort_keys=True)
                 for f in findings]


def fmt(v, scale=1.0, pct=False):
    if v is None:
        return "-"
    return f"{100 * v:+.1f}" if pct else f"{v / scale:.1f}"


def cells(name, row):
    if row is None:
        return [name] + ["failed"] + [""] * (len(HEADERS) - 2)
    unit = f"{fmt(row['fwd'], pct=True)} / {fmt(row['bwd'], pct=True)}" if row["has_units"] else "n/a"
    block = f"{fmt(row['block_fwd'], pct=True)} / {fmt(row['block_bwd'], pct=True)}" if row["has_units"] else "n/a"
    return [name + (" (calibration)" if name == "cal" else ""), str(row["ranks"]),
            fmt(row["step_m"], 1e6), fmt(row["step_p"], 1e6), fmt(row["step_e"], pct=True),
            fmt(row["peak_m"], MIB), fmt(row["peak_p"], MIB), fmt(row["peak_e"], pct=True),
            unit, block, "-" if row["unmapped"] is None else str(row["unmapped"])]


def text_table(rows):
    w = [max(len(r[i]) for r in [HEADERS] + rows) for i in range(len(HEADERS))]
    line = lambda r: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))
    return "\n".join([line(HEADERS)] + [line(r) for r in rows])


def md_table(rows):
    out = ["| " + " | ".join(HEADERS) + " |", "|---" * len(HEADERS) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="configs: " + ", ".join(CONFIGS))
    p.add_argument("--setup", action="store_true", help="create the venv (.venv-torch) and exit")
    p.add_argument("--venv", type=Path, default=Path(os.environ.get("SHARDCAST_TORCH_VENV",
                                                                    ROOT / ".venv-torch")),
                   help="venv with torch (default: $SHARDCAST_TORCH_VENV, else .venv-torch)")
    p.add_argument("--work", type=Path, default=ROOT / "build" / "validation-traces",
                   help="traces go to WORK/<config> (default: build/validation-traces)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    p.add_argument("--rerun", action="store_true", help="re-run configs whose traces exist")
    p.add_argument("--shardcast", type=Path, default=ROOT / "build" / "bin" / "shardcast")
    p.add_argument("--doc", type=Path, help="also write the output as Markdown to this file")
    a = p.parse_args(argv)
    if a.setup:
        return setup(a.venv)
    names = [n for n in a.configs.split(",") if n]
    bad = [n for n in names if n not in CONFIGS]
    if bad:
        p.error(f"unknown config(s) {', '.join(bad)}; known: {', '.join(CONFIGS)}")
    python = a.venv / "bin" / "python"
    work = a.work.resolve()
    log, failed, walls, notes = [], [], {}, []

    def say(s):
        print(s, flush=True)
        notes.append(s)

    for n in names:
        if not python.exists() and not traced(work / n, dict(BASE, **CONFIGS[n])["nproc"]):
            print(f"no venv at {a.venv}: run `scripts/validate-traces.py --setup` (or pass --venv)",
                  file=sys.stderr)
            return 2
        ok, secs = trace(python, n, work / n, a.rerun, log)
        walls[n] = secs
        if not ok:
            failed.append(f"trace {n}")
    traced_ok = [n for n in names if f"trace {n}" not in failed]

    before = {n: compare(a.shardcast, work / n, None, log) for n in traced_ok}
    profile = work / "profile-cal.json"
    calibrated = False
    if "cal" not in traced_ok:
        say("calibration: skipped (the `cal` config is not among those run)")
    elif not has_flag(a.shardcast, "calibrate", "--from-trace"):
        say("calibration: skipped (this shardcast's `calibrate` has no --from-trace)")
    elif not has_flag(a.shardcast, "compare", "--profile"):
        say("calibration: skipped (this shardcast's `compare` has no --profile)")
    else:
        rc, _, _ = run([shardcast(a.shardcast), "calibrate", "--from-trace", work / "cal",
                        "--plan", work / "cal" / "plan.json", "--out", profile], log)
        calibrated = rc == 0
        if not calibrated:
            failed.append("calibrate")
    after = {n: compare(a.shardcast, work / n, profile, log) for n in traced_ok} if calibrated else {}
    failed += [f"compare {n}" for n, (r, _) in before.items() if r is None]
    failed += [f"compare --profile {n}" for n, (r, _) in after.items() if r is None]

    tables = [("Before calibration (the plan's own CPU profile)", before)]
    if calibrated:
        tables.append((f"After calibration on `cal` ({profile.name})", after))
    rows = {t: [cells(n, res[n][0]) for n in traced_ok] for t, res in tables}
    for t, res in tables:
        print(f"\n{t}\n{text_table(rows[t])}")
        for n in traced_ok:
            for f in res[n][1]:
                print(f"  {n}: {f}")
    if any(r and not r["has_units"] for r, _ in before.values()):
        say("per-unit errors: n/a (this shardcast's compare --json has no `units`)")
    for n, s in walls.items():
        say(f"{n}: " + ("traces reused" if s is None else f"traced in {s:.1f} s"))
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    if a.doc:
        write_doc(a, work, traced_ok, tables, rows, notes, log)
    return 1 if failed else 0


def write_doc(a, work, names, tables, rows, notes, log):
    runs = {}
    for n in names:
        try:
            runs[n] = json.loads((work / n / "run.json").read_text())
        except (OSError, ValueError):
            pass
    info = next(iter(runs.values()), {})
    md = ["# Validation against real PyTorch FSDP runs (CPU, gloo)", "",
          f"Written by `scripts/validate-traces.py` on {datetime.date.today().isoformat()}: real "
          f"FSDP training runs of tiny models on this machine's CPU (torch {info.get('torch', '?')}, "
          f"transformers {info.get('transformers', '?')}, Python {info.get('python', '?')}), "
          "5 steps, no profiler schedule (absolute memory); shardcast compares the median of steps 1-4 "
          "with its prediction of the same plan. Errors are (predicted - measured) / measured. "
          "`cal` is the calibration config (tiny-llama, 2 ranks, block wrap, reshard, AC none, "
          "seq 128, micro-batch 2); every other row changes one thing from it. "
          "The script reports; it does not judge.", ""]
    md += [f"- {s}" for s in notes] + ["", "Commands (the runs, as run.json records them; then "
                                         "shardcast's):", "", "```sh"]
    md += [r.get("command", "?") for r in runs.values()]
    md += [c.replace(str(ROOT) + "/", "") for c in log] + ["```", ""]
    for t, res in tables:
        md += [f"## {t}", "", md_table(rows[t]), ""]
        found = [f"- {n}: {f}" for n in names for f in res[n][1]]
        md += found + ([""] if found else [])
    a.doc.write_text("\n".join(md).rstrip() + "\n")
    print(f"wrote {a.doc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
