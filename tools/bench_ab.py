#!/usr/bin/env python3
"""A/B step time of two ringstep binaries on one config, interleaved (ABBA rounds) so that
drift of a shared machine hits both alike. Prints each run's steady p50 step time (from its
summary.json) and the median B/A ratio per dtype. Usage:

  tools/bench_ab.py BIN_A BIN_B [--config configs/small.yaml] [--dtypes fp32,bf16]
                    [--rounds 3] [--steps 20] [--set key=value ...]

Both binaries run with one thread (`run.threads=1`), no evaluation and a fixed peak, so
that only the training steps differ. A ratio below 1 means B is faster.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile


def run(binary, config, dtype, steps, extra, out_dir):
    cmd = [binary, "train", config, "--set", "run.threads=1", "--set", f"train.steps={steps}",
           "--set", "train.eval_every=0", "--set", "train.eval_batches=1",
           "--set", "profile.peak_gflops=100", "--set", "profile.trace_steps=[]",
           "--set", f"precision.dtype={dtype}", "--set", f"run.out_dir={out_dir}",
           "--set", "run.overwrite=true"]
    for s in extra:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(f"{out_dir}/summary.json") as f:
        return json.load(f)["step_ms_p50"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("bin_a")
    p.add_argument("bin_b")
    p.add_argument("--config", default="configs/small.yaml")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--set", action="append", default=[], dest="extra")
    a = p.parse_args()
    print(f"A = {a.bin_a}\nB = {a.bin_b}\nconfig {a.config}, {a.steps} steps, 1 thread, "
          f"{a.rounds} ABBA rounds per dtype; steady p50 step time in ms")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in a.dtypes.split(","):
            ratios = []
            for r in range(a.rounds):
                order = ["a", "b"] if r % 2 == 0 else ["b", "a"]
                ms = {}
                for which in order:
                    binary = a.bin_a if which == "a" else a.bin_b
                    ms[which] = run(binary, a.config, dtype, a.steps, a.extra, f"{tmp}/{which}")
                ratios.append(ms["b"] / ms["a"])
                print(f"  {dtype} round {r + 1}: A {ms['a']:.1f} ms, B {ms['b']:.1f} ms, "
                      f"B/A {ratios[-1]:.4f}", flush=True)
            print(f"{dtype}: median B/A {statistics.median(ratios):.4f} "
                  f"(range {min(ratios):.4f}-{max(ratios):.4f})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
