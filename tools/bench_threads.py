#!/usr/bin/env python3
"""Intra-rank threading benchmark (issue 11): tokens/s of 1 rank x 1 thread, 1 rank x 2
threads and (tiny.yaml) 2 ranks x 1 thread at the same global batch, interleaved in rounds
so that drift of a shared machine hits every layout alike. Prints each run and, per config
and dtype, the median over rounds of each layout's tokens/s divided by 1 x 1's from the same
round, then the same table from each layout's best round.

  tools/bench_threads.py [--bin build/ringstep] [--rounds 3] [--configs tiny,small]
                         [--dtypes fp32,bf16] [--set key=value ...]

Time it on an otherwise idle machine: every layout uses all of its cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

STEPS = {"tiny": 30, "small": 10}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def layouts(config):
    out = [("1x1", 1, 1), ("1x2", 1, 2)]
    if config == "tiny":
        out.append(("2x1", 2, 1))
    return out


def run(binary, config, dtype, ranks, threads, extra, out_dir):
    steps = STEPS[config]
    sets = {"run.threads": threads, "train.steps": steps, "train.eval_every": 0,
            "profile.peak_gflops": 100, "profile.trace_steps": "[]", "precision.dtype": dtype,
            "run.out_dir": out_dir, "run.overwrite": "true", "train.warmup_steps": 0}
    if ranks == 2 and config == "tiny":
        sets["train.grad_accum_steps"] = 1  # 8 x 1 x 2 ranks = 1 rank's 8 x 2: same global batch
    cmd = [binary, "train", f"configs/{config}.yaml"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    cmd += [a for s in extra for a in ("--set", s)]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--bind-to", "core"] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, **MPI_ENV})
    with open(f"{out_dir}/summary.json") as f:
        return json.load(f)["tokens_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", default="build/ringstep")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--configs", default="tiny,small")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--set", action="append", default=[], dest="extra")
    a = p.parse_args()
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in a.configs.split(","):
            for dtype in a.dtypes.split(","):
                ratios = {name: [] for name, _, _ in layouts(config)}
                tok = {name: [] for name, _, _ in layouts(config)}
                for r in range(a.rounds):
                    order = layouts(config) if r % 2 == 0 else layouts(config)[::-1]
                    got = {}
                    for name, ranks, threads in order:
                        got[name] = run(a.bin, config, dtype, ranks, threads, a.extra, f"{tmp}/{name}")
                        tok[name].append(got[name])
                    for name in got:
                        ratios[name].append(got[name] / got["1x1"])
                    print(f"  {config} {dtype} round {r + 1}: " +
                          ", ".join(f"{n} {got[n]:.0f} tok/s" for n in got), flush=True)
                table.append((config, dtype, tok, ratios))
    print_table(table, "median over rounds (ratios within a round)", statistics.median, True)
    print_table(table, "best of rounds (a shared VM's noise only slows a run)", max, False)


def print_table(table, title, stat, per_round):
    """One row per config and dtype: STAT of each layout's tokens/s, and of the ratios (of
    each round's ratio when PER_ROUND, else of the layouts' STAT values)."""
    print(f"\n{title}\n")
    print("| config | dtype | 1x1 tok/s | 1x2 tok/s | 2x1 tok/s | 1x2 / 1x1 | 2x1 / 1x1 | 1x2 / 2x1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for config, dtype, tok, ratios in table:
        two = "2x1" in tok
        if per_round:
            r12, r21 = stat(ratios["1x2"]), stat(ratios["2x1"]) if two else 0
            r12_21 = stat([x / y for x, y in zip(tok["1x2"], tok["2x1"])]) if two else 0
        else:
            r12 = stat(tok["1x2"]) / stat(tok["1x1"])
            r21 = stat(tok["2x1"]) / stat(tok["1x1"]) if two else 0
            r12_21 = stat(tok["1x2"]) / stat(tok["2x1"]) if two else 0
        row = [config, dtype, f"{stat(tok['1x1']):.0f}", f"{stat(tok['1x2']):.0f}",
               f"{stat(tok['2x1']):.0f}" if two else "-", f"{r12:.2f}x",
               f"{r21:.2f}x" if two else "-", f"{r12_21:.2f}" if two else "-"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
