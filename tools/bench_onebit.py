#!/usr/bin/env python3
"""1-bit Adam against AdamW (overlapped fp32 ring) on configs/bench_onebit.yaml at emulated
link bandwidths, 2 ranks x 1 thread. For each bandwidth it runs AdamW, then 1-bit Adam,
and prints one markdown row (docs/perf.md, "1-bit Adam"):

  AdamW step: median step time of steps 3.. (the first two are cold);
  1-bit step: median step time of the compressed steps after the first one;
  compute:    1-bit Adam's median data + forward + backward + optimizer + other of those steps;
  comm:       their median time in flight of the compressed exchange;
  fit:        1-bit step / (compute + comm) - 1 (the target is within 25%);
  volume:     AdamW's bytes sent per rank per step / 1-bit Adam's compressed-stage bytes.

Usage: tools/bench_onebit.py [--bandwidths 10,1,0.25,0.1] [--steps 10] [--np 2]
                             [--bin build/ringstep] [--set key=value ...]
"""
import argparse
import json
import statistics
import subprocess
import tempfile


def train(args, out_dir, optimizer, gbps):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "core", "-np", str(args.np), args.bin,
           "train", "configs/bench_onebit.yaml", "--set", f"run.out_dir={out_dir}",
           "--set", f"optimizer.name={optimizer}", "--set", f"comm.link.bandwidth_gbps={gbps}",
           "--set", f"train.steps={args.steps}", "--set", "run.overwrite=true"]
    for s in args.extra:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(f"{out_dir}/steps.jsonl") as f:
        return [json.loads(line) for line in f]


def med(recs, f):
    return statistics.median(f(r) for r in recs)


def row(args, gbps, tmp):
    adamw = train(args, f"{tmp}/adamw_{gbps}", "adamw", gbps)[2:]
    onebit = train(args, f"{tmp}/onebit_{gbps}", "onebit_adam", gbps)
    compressed = [r for r in onebit if r.get("stage") == "compressed"][1:]
    t_adamw = med(adamw, lambda r: r["time_ms"]["step"])
    t_onebit = med(compressed, lambda r: r["time_ms"]["step"])
    compute = med(compressed, lambda r: r["time_ms"]["step"] - r["time_ms"]["comm_exposed"])
    comm = med(compressed, lambda r: r["time_ms"]["comm"])
    volume = med(adamw, lambda r: r["comm_sent_bytes"]) / med(compressed,
                                                              lambda r: r["comm_sent_bytes"])
    err = med(compressed, lambda r: r["compression_error"])
    return (f"| {gbps} | {t_adamw:.0f} | {t_onebit:.0f} | {t_adamw / t_onebit:.2f}x | "
            f"{compute:.0f} | {comm:.0f} | {100 * (t_onebit / (compute + comm) - 1):+.0f}% | "
            f"{volume:.1f} | {err:.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bandwidths", default="10,1,0.25,0.1")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--bin", default="build/ringstep")
    p.add_argument("--set", action="append", default=[], dest="extra")
    args = p.parse_args()
    print("| link Gb/s | AdamW step ms | 1-bit step ms | speed-up | 1-bit compute ms | "
          "1-bit comm ms | fit | volume AdamW/1-bit | compression error |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for gbps in args.bandwidths.split(","):
            print(row(args, gbps, tmp), flush=True)


if __name__ == "__main__":
    main()
