#!/usr/bin/env python3
"""1-bit Adam against AdamW (overlapped fp32 ring) on configs/bench_onebit.yaml at emulated
link bandwidths, 2 ranks x 1 thread. Each round runs, in turn, AdamW at the floor link
(--floor-gbps, the fastest: its communication is nearly free there) and, for each bandwidth,
AdamW then 1-bit Adam (the floor run is the row's own AdamW run when the floor link is
among the bandwidths); rounds alternate the order of the bandwidths so that a shared
machine's drift hits all alike. Prints one markdown row per bandwidth (docs/perf.md,
"1-bit Adam"), medians over the rounds:

  AdamW step: median step time of steps 3.. (the first two are cold);
  1-bit step: median step time of the steps after the warm-up and the first one after it;
  speed-up:   AdamW step / 1-bit step (with the range over the rounds when --rounds > 1);
  ceiling:    AdamW step / AdamW's step at the floor link: the speed-up of a 1-bit step
              whose exchange cost nothing, on this machine's compute;
  of ceiling: speed-up / ceiling, per round, median;
  1-bit ran:  compressed, or AdamW where compress: auto (the default) chose not to;
  compute:    1-bit Adam's median data + forward + backward + optimizer + other of those steps;
  comm:       their median time in flight of the compressed exchange;
  fit:        1-bit step / (compute + comm) - 1 (the target is within 25%);
  volume:     AdamW's bytes sent per rank per step / 1-bit Adam's compressed-stage bytes.

With --hosts (root), each rank runs on a namespace host of launch/testhosts instead, and a
bandwidth is the kernel-shaped rate of every host's link (tbf, both directions), with no
application-level emulation: the two columns of docs/comm.md's comparison.

Usage: tools/bench_onebit.py [--bandwidths 10,1,0.25,0.1] [--rounds 1] [--steps 14]
                             [--floor-gbps 10] [--np 2] [--bin build/ringstep] [--hosts]
                             [--set key=value ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# mpirun as root (CI, the workplace machines) refuses to start without these.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

FREEZE_STEP = 6  # configs/bench_onebit.yaml's optimizer.onebit.freeze_step


def train(args, out_dir, optimizer, gbps):
    sets = [f"run.out_dir={out_dir}", f"optimizer.name={optimizer}", f"train.steps={args.steps}",
            "run.overwrite=true", *args.extra]
    if args.hosts:
        prefix = f"ob{os.getpid()}"[:8]
        hosts = ",".join(f"{prefix}h{i}" for i in range(1, args.np + 1))
        subprocess.run(["launch/testhosts", "up", str(args.np), "--gbps", gbps, "--prefix", prefix,
                        "--owner", str(os.getpid())], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        cmd = ["launch/ringstep-mpirun", "--hosts", hosts, "configs/bench_onebit.yaml"]
        sets += ["comm.link.bandwidth_gbps=0", "comm.link.latency_us=0"]
    else:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "core", "-np", str(args.np), args.bin,
               "train", "configs/bench_onebit.yaml"]
        sets += [f"comm.link.bandwidth_gbps={gbps}"]
    for s in sets:
        cmd += ["--set", s]
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, RINGSTEP_BIN=os.path.abspath(args.bin)))
    finally:
        if args.hosts:
            subprocess.run(["launch/testhosts", "down", "--prefix", prefix], check=True)
    with open(f"{out_dir}/steps.jsonl") as f:
        return [json.loads(line) for line in f]


def med(recs, f):
    return statistics.median(f(r) for r in recs)


def adamw_run(args, tmp, gbps):
    """AdamW's steady steps' (step ms, bytes sent per rank)."""
    recs = train(args, f"{tmp}/adamw_{gbps}", "adamw", gbps)[2:]
    return med(recs, lambda r: r["time_ms"]["step"]), med(recs, lambda r: r["comm_sent_bytes"])


def onebit_run(args, tmp, gbps):
    """1-bit Adam's steps after the warm-up and the first one after it: step, compute, comm
    ms, bytes, error, and whether they compressed (compress: auto may choose not to)."""
    recs = train(args, f"{tmp}/onebit_{gbps}", "onebit_adam", gbps)
    c = recs[FREEZE_STEP + 1:]
    if not c:
        sys.exit("bench_onebit: no step after the first one past the warm-up; raise --steps")
    compressed = [r for r in c if r.get("stage") == "compressed"]
    return (med(c, lambda r: r["time_ms"]["step"]),
            med(c, lambda r: r["time_ms"]["step"] - r["time_ms"]["comm_exposed"]),
            med(c, lambda r: r["time_ms"]["comm"]), med(c, lambda r: r["comm_sent_bytes"]),
            med(compressed, lambda r: r["compression_error"]) if compressed else float("nan"),
            len(compressed) == len(c))


def row(gbps, adamw, onebit, floor):
    """ADAMW, ONEBIT: per-round results at GBPS; FLOOR: per-round AdamW steps at the floor."""
    t_adamw = statistics.median(a[0] for a in adamw)
    t_onebit = statistics.median(o[0] for o in onebit)
    speedups = [a[0] / o[0] for a, o in zip(adamw, onebit)]
    speedup = f"{statistics.median(speedups):.2f}x"
    if len(speedups) > 1:
        speedup += f" ({min(speedups):.2f}-{max(speedups):.2f})"
    ceilings = [a[0] / f for a, f in zip(adamw, floor)]
    ceiling = statistics.median(ceilings)
    of_ceiling = statistics.median(s / c for s, c in zip(speedups, ceilings))
    compute = statistics.median(o[1] for o in onebit)
    comm = statistics.median(o[2] for o in onebit)
    volume = statistics.median(a[1] for a in adamw) / statistics.median(o[3] for o in onebit)
    err = statistics.median(o[4] for o in onebit)
    mode = {True: "compressed", False: "AdamW"}
    chosen = "/".join(sorted({mode[o[5]] for o in onebit}))
    return (f"| {gbps} | {t_adamw:.0f} | {t_onebit:.0f} | {speedup} | {ceiling:.2f}x | "
            f"{of_ceiling:.2f} | {chosen} | {compute:.0f} | {comm:.0f} | "
            f"{100 * (t_onebit / (compute + comm) - 1):+.0f}% | {volume:.1f} | {err:.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bandwidths", default="10,1,0.25,0.1")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--floor-gbps", default="10")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--bin", default="build/ringstep")
    p.add_argument("--hosts", action="store_true",
                   help="namespace hosts with kernel-shaped links (launch/testhosts; root)")
    p.add_argument("--set", action="append", default=[], dest="extra")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.steps < FREEZE_STEP + 2:  # 1-bit needs two compressed steps
        p.error(f"--steps must be at least {FREEZE_STEP + 2} (bench_onebit.yaml freezes after step {FREEZE_STEP})")
    bandwidths = args.bandwidths.split(",")
    adamw = {g: [] for g in bandwidths}
    onebit = {g: [] for g in bandwidths}
    floor = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            print(f"bench_onebit: round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            if args.floor_gbps not in bandwidths:
                floor.append(adamw_run(args, tmp, args.floor_gbps)[0])
            for gbps in (bandwidths if r % 2 == 0 else bandwidths[::-1]):
                adamw[gbps].append(adamw_run(args, tmp, gbps))
                onebit[gbps].append(onebit_run(args, tmp, gbps))
            if args.floor_gbps in bandwidths:
                floor.append(adamw[args.floor_gbps][-1][0])
    print(f"AdamW at the floor link ({args.floor_gbps} Gb/s): step "
          f"{statistics.median(floor):.0f} ms (median of {len(floor)})")
    print("| link Gb/s | AdamW step ms | 1-bit step ms | speed-up | ceiling | of ceiling | "
          "1-bit ran | 1-bit compute ms | 1-bit comm ms | fit | volume AdamW/1-bit | "
          "compression error |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for gbps in bandwidths:
        print(row(gbps, adamw[gbps], onebit[gbps], floor))


if __name__ == "__main__":
    main()
