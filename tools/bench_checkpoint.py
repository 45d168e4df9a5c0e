#!/usr/bin/env python3
"""Checkpoint write speed against the disk's, and what checkpointing adds to a run.

Runs CONFIG (default configs/small.yaml, 1 rank x 1 thread) alternately without checkpoints
and with one every EVERY steps, and between runs measures the disk's sequential write speed
in the same directory: files of the checkpoint's sizes written and fsynced one after the
other, as a checkpoint is. Prints, as medians over the rounds:
  - the checkpoint's size, its commit time and speed (the `checkpoint:` lines), and that
    speed as a fraction of the disk's (target >= 0.5);
  - the loop's extra wall time per checkpoint (with - without, over the number saved)
    against the commit time: the step that saves is longer by no more than the save.

Usage: tools/bench_checkpoint.py [--config F] [--steps N] [--every K] [--rounds R]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "build", "ringstep")
LINE = re.compile(r"^checkpoint: \S+ \(([\d.]+) MiB in ([\d.]+) ms")


def train(config, out_dir, steps, every):
    args = [BINARY, "train", config, "--set", f"run.out_dir={out_dir}", "--set",
            f"train.steps={steps}", "--set", f"checkpoint.every={every}", "--set",
            "run.threads=1", "--set", "profile.trace_steps=[]", "--set", "run.overwrite=true",
            "--set", "checkpoint.resume=never"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    saves = [(float(m[1]), float(m[2])) for m in map(LINE.match, out.splitlines()) if m]
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)["loop_wall_s"], saves


def disk_mib_s(directory, sizes):
    """Writes and fsyncs files of SIZES bytes one after the other, as a checkpoint does."""
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    for i, size in enumerate(sizes):
        path = os.path.join(directory, f"probe-{i}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        for done in range(0, size, len(block)):
            os.write(fd, block[: min(len(block), size - done)])
        os.fsync(fd)
        os.close(fd)
    dt = time.perf_counter() - t0
    for i in range(len(sizes)):
        os.remove(os.path.join(directory, f"probe-{i}"))
    return sum(sizes) / 2**20 / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "small.yaml"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ringstep_bench_ckpt_", dir=ROOT) as tmp:
        plain_s, ckpt_s, commits, disks, mib = [], [], [], [], 0.0
        for r in range(args.rounds):
            wall, _ = train(args.config, os.path.join(tmp, "plain"), args.steps, 0)
            plain_s.append(wall)
            run_dir = os.path.join(tmp, "ckpt")
            wall, saves = train(args.config, run_dir, args.steps, args.every)
            ckpt_s.append((wall, len(saves)))
            commits += [ms for _, ms in saves]
            mib = saves[0][0]
            step_dir = os.path.join(run_dir, "checkpoints", f"step-{args.steps}")
            sizes = [os.path.getsize(os.path.join(step_dir, n)) for n in sorted(os.listdir(step_dir))]
            disks.append(disk_mib_s(run_dir, sizes))
            print(f"round {r + 1}/{args.rounds}: loop {plain_s[-1]:.2f} s without, {wall:.2f} s "
                  f"with {len(saves)} checkpoints; disk {disks[-1]:.0f} MiB/s", flush=True)
        commit_ms, disk = statistics.median(commits), statistics.median(disks)
        extra_ms = statistics.median(
            (w - p) * 1e3 / n for (w, n), p in zip(ckpt_s, plain_s))
        speed = mib / (commit_ms / 1e3)
        print(f"| checkpoint | commit ms | MiB/s | disk MiB/s | fraction of disk | "
              f"extra loop ms per checkpoint | extra / commit |")
        print(f"|---|---|---|---|---|---|---|")
        print(f"| {mib:.1f} MiB | {commit_ms:.1f} | {speed:.0f} | {disk:.0f} | "
              f"{speed / disk:.2f} | {extra_ms:.1f} | {extra_ms / commit_ms:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
