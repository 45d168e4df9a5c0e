#!/usr/bin/env python3
"""1-bit Adam's convergence against AdamW, with AdamW's own run-to-run spread beside it.

For each seed, three runs of configs/tiny.yaml (2 ranks x 1 thread, both optimizers with
the same betas): AdamW; AdamW's twin, the same run with optimizer.eps multiplied by
(1 + --twin-eps), a change far below anything that matters to the optimizer but one that
perturbs the trajectory from its first steps; and 1-bit Adam frozen at --freeze of the
steps. A run in its fast drop in loss amplifies such a perturbation: the twin's distance
from AdamW is how far two equally good runs of that seed land apart, the noise floor that
a difference between the optimizers has to be read against (docs/optim.md).

Prints one markdown row per seed (docs/perf.md, "1-bit Adam"):

  AdamW, twin, 1-bit: final validation loss (32 held-out micro-batches);
  spread:  |twin - AdamW|;
  delta:   1-bit - AdamW (the issue's target: within 0.03 nats);
  reading: "within 0.03", or "inside the spread" when |delta| <= spread, else "outside".

Usage: tools/conv_onebit.py [--seeds 7,42,3,1234] [--steps 600] [--freeze 0.2]
                            [--betas 0.9,0.999] [--data FILE] [--np 2] [--bin build/ringstep]
                            [--twin-eps 0.01] [--set key=value ...]
--data FILE trains on a token file made by `ringstep prepare` (default: tiny.yaml's
synthetic source). Each run takes about 3-4 minutes at 600 steps on 2 cores.
"""
import argparse
import json
import subprocess
import sys
import tempfile

TARGET = 0.03  # nats: issue 10's convergence target


def final_val(args, out_dir, sets):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(args.np), args.bin,
           "train", "configs/tiny.yaml", "--set", "run.threads=1",
           "--set", "profile.peak_gflops=100", "--set", f"run.out_dir={out_dir}",
           "--set", "run.overwrite=true", "--set", f"train.steps={args.steps}",
           "--set", f"train.eval_every={args.steps}", "--set", "train.eval_batches=32",
           "--set", f"optimizer.betas=[{args.betas}]"]
    if args.data:
        cmd += ["--set", "data.source=file", "--set", f"data.path={args.data}"]
    for s in args.extra + sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(f"{out_dir}/summary.json") as f:
        return json.load(f)["final_val_loss"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="7,42,3,1234")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--freeze", type=float, default=0.2, help="freeze_step / steps")
    p.add_argument("--betas", default="0.9,0.999")
    p.add_argument("--data", default="")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--bin", default="build/ringstep")
    p.add_argument("--twin-eps", type=float, default=0.01)
    p.add_argument("--set", dest="extra", action="append", default=[])
    args = p.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"conv_onebit: --seeds must be integers separated by commas, got '{args.seeds}'",
              file=sys.stderr)
        sys.exit(2)
    freeze = round(args.freeze * args.steps)
    if args.steps < 10 or not 1 <= freeze < args.steps:
        print(f"conv_onebit: need --steps >= 10 and 1 <= freeze step ({freeze}) < --steps",
              file=sys.stderr)
        sys.exit(2)
    if args.twin_eps <= 0:
        print("conv_onebit: --twin-eps must be > 0", file=sys.stderr)
        sys.exit(2)
    eps = 1e-8 * (1 + args.twin_eps)  # tiny.yaml's eps, perturbed
    print(f"| seed | AdamW | twin (eps {eps:.3g}) | spread | 1-bit Adam (freeze {freeze}) "
          f"| delta | reading |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="conv_onebit_") as tmp:
        for seed in seeds:
            s = [f"run.seed={seed}"]
            print(f"conv_onebit: seed {seed}: AdamW, twin, 1-bit Adam ...", file=sys.stderr)
            a = final_val(args, f"{tmp}/adamw_{seed}", s)
            twin = final_val(args, f"{tmp}/twin_{seed}", s + [f"optimizer.eps={eps:.6g}"])
            ob = final_val(args, f"{tmp}/onebit_{seed}",
                           s + ["optimizer.name=onebit_adam",
                                f"optimizer.onebit.freeze_step={freeze}"])
            spread, delta = abs(twin - a), ob - a
            reading = ("within 0.03" if abs(delta) <= TARGET else
                       "inside the spread" if abs(delta) <= spread else "outside")
            print(f"| {seed} | {a:.4f} | {twin:.4f} | {spread:.3f} | {ob:.4f} | {delta:+.3f} "
                  f"| {reading} |", flush=True)


if __name__ == "__main__":
    main()
