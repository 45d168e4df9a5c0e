#!/usr/bin/python3
"""Precision and recomputation benchmark on configs/small.yaml (one rank, one thread).

Runs `ringstep train` for each (dtype, recompute policy) pair, ROUNDS times in interleaved
order (A B C ... then ... C B A, alternating) so that this shared machine's drift hits
every pair alike,
and prints per pair: the activation arena's peak bytes, the median step time (warm-up
steps excluded, from summary.json), the recompute time per step, and ratios against
fp32 + none measured in the same run. Targets (issue 4): full recompute cuts the
activation peak by >= 60% for <= 35% more step time; bf16 activations are <= 55% of
fp32's and a bf16 step is no slower than an fp32 one.

Usage: tools/bench_precision.py [--steps 12] [--rounds 2] [--json FILE] [--set k=v ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["none", "selective", "every_k", "full"]


def run(binary, out_dir, dtype, policy, steps, extra):
    cmd = [binary, "train", os.path.join(ROOT, "configs/small.yaml"),
           "--set", f"precision.dtype={dtype}", "--set", f"recompute.policy={policy}",
           "--set", "recompute.k=2", "--set", f"train.steps={steps}",
           "--set", "run.threads=1", "--set", "profile.trace_steps=[]",
           "--set", "profile.peak_gflops=100", "--set", "train.eval_batches=1",
           "--set", f"run.out_dir={out_dir}"]
    for kv in extra:
        cmd += ["--set", kv]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    summary = json.load(open(os.path.join(out_dir, "summary.json")))
    steps_ms, recompute_ms = [], []
    with open(os.path.join(out_dir, "steps.jsonl")) as f:
        records = [json.loads(line) for line in f]
    for rec in records[summary["warmup_steps_excluded"]:]:
        steps_ms.append(rec["time_ms"]["step"])
        recompute_ms.append(rec["time_ms"]["recompute"])
    return {"act_peak": summary["activations_peak_bytes"],
            "step_ms": statistics.median(steps_ms),
            "recompute_ms": statistics.median(recompute_ms),
            "final_loss": summary["final_loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/ringstep"))
    ap.add_argument("--json")
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    pairs = [(d, p) for d in args.dtypes.split(",") for p in POLICIES]
    results = {pair: [] for pair in pairs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            # Odd rounds run the pairs in reverse order, so that an effect of a run's position
            # in the round (this host slows down over minutes) does not favour any pair.
            order = pairs if r % 2 == 0 else list(reversed(pairs))
            for i, (dtype, policy) in enumerate(order):
                print(f"round {r + 1}/{args.rounds}: {dtype} {policy} "
                      f"({i + 1}/{len(pairs)}) ...", file=sys.stderr, flush=True)
                res = run(args.binary, os.path.join(tmp, f"{dtype}-{policy}-{r}"), dtype,
                          policy, args.steps, args.set)
                results[(dtype, policy)].append(res)
                print(f"  step p50 {res['step_ms']:.1f} ms, recompute {res['recompute_ms']:.1f} ms, "
                      f"act peak {res['act_peak'] / 2**20:.1f} MiB", file=sys.stderr, flush=True)
    # Per pair: the median over rounds of each round's median step time.
    table = {}
    for pair, runs in results.items():
        table[pair] = {"act_peak": runs[0]["act_peak"],
                       "step_ms": statistics.median(x["step_ms"] for x in runs),
                       "recompute_ms": statistics.median(x["recompute_ms"] for x in runs),
                       "final_loss": runs[-1]["final_loss"]}
    base = table[(args.dtypes.split(",")[0], "none")]
    print(f"\nconfigs/small.yaml, 1 rank x 1 thread, {args.steps} steps x {args.rounds} rounds "
          f"(interleaved, every other round reversed); ratios against fp32 none in the same run")
    print(f"{'dtype':6} {'recompute':10} {'act peak MiB':>12} {'vs fp32':>8} {'vs none':>8} "
          f"{'step ms':>9} {'vs fp32':>8} {'vs none':>8} {'recomp ms':>9}")
    for (dtype, policy), t in table.items():
        none = table[(dtype, "none")]
        print(f"{dtype:6} {policy:10} {t['act_peak'] / 2**20:12.1f} "
              f"{t['act_peak'] / base['act_peak']:8.3f} {t['act_peak'] / none['act_peak']:8.3f} "
              f"{t['step_ms']:9.1f} {t['step_ms'] / base['step_ms']:8.3f} "
              f"{t['step_ms'] / none['step_ms']:8.3f} {t['recompute_ms']:9.1f}")
    checks = []
    for dtype in args.dtypes.split(","):
        none, full = table[(dtype, "none")], table[(dtype, "full")]
        cut = 1 - full["act_peak"] / none["act_peak"]
        slower = full["step_ms"] / none["step_ms"] - 1
        checks.append((f"{dtype} full: activation peak -{100 * cut:.1f}% (>= 60%), "
                       f"step time {100 * slower:+.1f}% (<= 35%)", cut >= 0.6 and slower <= 0.35))
    if ("bf16", "none") in table and ("fp32", "none") in table:
        b, f = table[("bf16", "none")], table[("fp32", "none")]
        checks.append((f"bf16/fp32 activation peak {b['act_peak'] / f['act_peak']:.3f} (<= 0.55)",
                       b["act_peak"] / f["act_peak"] <= 0.55))
        checks.append((f"bf16/fp32 step time {b['step_ms'] / f['step_ms']:.3f} (<= 1.0)",
                       b["step_ms"] <= f["step_ms"]))
    for text, ok in checks:
        print(("PASS " if ok else "MISS ") + text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{d}/{p}": t for (d, p), t in table.items()}, f, indent=2)


if __name__ == "__main__":
    main()
