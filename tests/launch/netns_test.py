#!/usr/bin/env python3
"""ringstep across namespace hosts: ranks in launch/testhosts's network namespaces, started by
launch/ringstep-mpirun --hosts, talking Open MPI over TCP (ctest label netns).

  collectives NP  the communicator, ring AllReduce and sign-compressed AllReduce multi-rank
                  tests (exact against their references) on NP hosts
  losses          a 2-host run's losses equal, bit for bit, those of the same 2 ranks on one host
  linkcut         a host's link cut mid-run (ip link set eth0 down) ends the job within 60 s:
                  mpirun names the lost node, which the launcher's map names as rank 1;
                  steps.jsonl holds whole records only and every committed checkpoint is
                  complete
  sigterm         SIGTERM to the rank on the second host: every rank stops after the same step,
                  a checkpoint is committed, and the rerun across the hosts resumes from it with
                  the loss curve of a run never stopped, bit for bit
  slowlink        2 hosts at 1 Gbit/s, the second reshaped to 0.1 Gbit/s: every rank records
                  its link (summary.json's network facts) and `ringstep report` names rank 1's
                  link as the one the exchange runs at

Exits 77 (ctest: skipped) with the reason when namespace hosts cannot be made here (not root,
no `ip netns`). The hosts are torn down on every exit; a set left by a killed test is reaped
by the next `testhosts up` (--owner).

Usage: netns_test.py RINGSTEP MPITEST_DIR CASE [NP]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import run_tools  # noqa: E402
from run_tools import (committed_stop, expect_resumed_bit_exact, fail,  # noqa: E402
                       losses, records)

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RINGSTEP, MPITESTS, CASE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
NP = int(sys.argv[4]) if len(sys.argv) > 4 else 2
TESTHOSTS = os.path.join(SRC, "launch", "testhosts")
LAUNCHER = os.path.join(SRC, "launch", "ringstep-mpirun")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", RINGSTEP_BIN=RINGSTEP)
SKIP = 77


class Hosts:
    """NP namespace hosts for the duration of a with-block."""

    def __init__(self, n, gbps=10):
        self.prefix = f"t{os.getpid()}"[:8]
        self.n, self.gbps = n, gbps
        self.names = [f"{self.prefix}h{i}" for i in range(1, n + 1)]

    def __enter__(self):
        up = subprocess.run([TESTHOSTS, "up", str(self.n), "--gbps", str(self.gbps), "--prefix",
                             self.prefix, "--owner", str(os.getpid())],
                            capture_output=True, text=True)
        if up.returncode != 0:
            self.__exit__()
            fail(f"testhosts up exited {up.returncode}:\n{up.stderr}")
        return self

    def __exit__(self, *exc):
        subprocess.run([TESTHOSTS, "down", "--prefix", self.prefix], capture_output=True)

    def launch(self, args):
        return [LAUNCHER, "--hosts", ",".join(self.names), *args]

    def rank_pid(self, host_index):
        """The ringstep process in namespace host_index (0-based)."""
        deadline = time.time() + 60
        while time.time() < deadline:
            pids = subprocess.run(["ip", "netns", "pids", self.names[host_index]],
                                  capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:  # by its executable: ringstep re-executes itself through /proc/self/exe
                    if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(RINGSTEP):
                        return int(pid)
                except OSError:
                    pass
            time.sleep(0.05)
        fail(f"no ringstep process on {self.names[host_index]}")


def start(args):
    return run_tools.start(args, ENV, cwd=SRC)


def finish(proc, timeout=120):
    return run_tools.finish(proc, timeout)


def run(args):
    return run_tools.run(args, ENV, cwd=SRC, timeout=120)


def train_args(run_dir, steps, extra=()):
    sets = [f"run.out_dir={run_dir}", f"train.steps={steps}", "run.threads=1",
            "train.eval_every=0", "train.eval_batches=1", "train.schedule=constant",
            "train.micro_batch=4", "profile.peak_gflops=100", "profile.log_every=1", *extra]
    args = ["configs/tiny.yaml"]
    for s in sets:
        args += ["--set", s]
    return args


def one_host(run_dir, steps, extra=()):
    """The same 2 ranks on this machine, shared memory."""
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", RINGSTEP, "train",
            *train_args(run_dir, steps, extra)]


def wait_for_steps(run_dir, n, proc):
    run_tools.wait_for_steps(run_dir, n, proc, poll_s=0.02)


def case_collectives(tmp):
    with Hosts(NP) as hosts:
        for name in ("communicator_mpitest", "ring_allreduce_mpitest", "sign_allreduce_mpitest"):
            t0 = time.time()
            out = run(hosts.launch(["--exec", os.path.join(MPITESTS, name), "--", "--gtest_brief=1"]))
            if "PASSED" not in out:
                fail(f"{name} on {NP} hosts:\n{out}")
            print(f"ok: {name} on {NP} hosts in {time.time() - t0:.1f} s")


def case_losses(tmp):
    steps = 12
    here, there = os.path.join(tmp, "one_host"), os.path.join(tmp, "two_hosts")
    run(one_host(here, steps))
    with Hosts(2) as hosts:
        run(hosts.launch(train_args(there, steps)))
    a, b = losses(here), losses(there)
    if len(a) != steps or a != b:
        fail(f"losses differ:\none host  {a}\ntwo hosts {b}")
    print(f"ok: {steps} steps on 2 hosts, losses equal to 2 ranks on one host bit for bit")


def case_linkcut(tmp):
    run_dir = os.path.join(tmp, "cut")
    extra = ["checkpoint.every=3"]
    with Hosts(2) as hosts:
        proc = start(hosts.launch(train_args(run_dir, 100000, extra)))
        wait_for_steps(run_dir, 4, proc)
        subprocess.run(["ip", "-n", hosts.names[1], "link", "set", "eth0", "down"], check=True)
        t0 = time.time()
        rc, out = finish(proc, timeout=90)
        elapsed = time.time() - t0
    if rc == 0:
        fail(f"the job exited 0 after the link of rank 1's host was cut:\n{out}")
    if elapsed > 60:
        fail(f"the job took {elapsed:.1f} s > 60 s to end:\n{out}")
    lost = hosts.names[1]
    if f"rank 1 on {lost}" not in out or "lost communication with a remote daemon" not in out \
            or f"on node {lost}" not in out:
        fail(f"no message naming {lost}, rank 1's host, as lost:\n{out}")
    recs = records(run_dir)
    ckpts = os.path.join(run_dir, "checkpoints")
    committed = [n for n in os.listdir(ckpts) if not n.endswith(".tmp")]
    for n in committed:
        if not os.path.exists(os.path.join(ckpts, n, "manifest.json")):
            fail(f"committed checkpoint {n} has no manifest")
    print(f"ok: link cut after step {recs[-1]['step']}: exit {rc} in {elapsed:.1f} s naming "
          f"rank 1; {len(recs)} whole records; committed checkpoints {sorted(committed)}")


def case_sigterm(tmp):
    steps, extra = 16, ["checkpoint.every=1000"]
    straight, split = os.path.join(tmp, "straight"), os.path.join(tmp, "split")
    run(one_host(straight, steps, extra))
    with Hosts(2) as hosts:
        proc = start(hosts.launch(train_args(split, steps, extra)))
        rank1 = hosts.rank_pid(1)
        wait_for_steps(split, 4, proc)
        os.kill(rank1, signal.SIGTERM)  # one rank, on the second host: the ranks must agree
        rc, out = finish(proc)
        if rc != 0 or "stopped by a signal after step" not in out:
            fail(f"SIGTERM: exit {rc}, expected 0 and the stop line:\n{out}")
        stopped, ckpt = committed_stop(out, split, steps)
        out = run(hosts.launch(train_args(split, steps, extra)))
    expect_resumed_bit_exact(out, ckpt, stopped, straight, split)
    print(f"ok: SIGTERM to rank 1 on the second host stopped after step {stopped}, "
          f"checkpoint committed, {steps} steps resumed across hosts bit-exact")


def case_slowlink(tmp):
    run_dir = os.path.join(tmp, "slow")
    with Hosts(2, gbps=1) as hosts:
        subprocess.run([TESTHOSTS, "shape", hosts.names[1], "0.1"], check=True,
                       capture_output=True)
        run(hosts.launch(train_args(run_dir, 12)))
    with open(os.path.join(run_dir, "summary.json")) as f:
        network = json.load(f)["network"]
    caps = [(n["interface"], n["start"]["cap_gbps"], n["end"]["cap_gbps"]) for n in network]
    if caps != [("eth0", 1, 1), ("eth0", 0.1, 0.1)]:
        fail(f"network facts: (interface, cap at start, cap at end) per rank {caps}, expected "
             f"eth0 capped at 1 and 0.1 Gbit/s:\n{json.dumps(network, indent=1)}")
    report = subprocess.run([RINGSTEP, "report", run_dir], env=ENV, capture_output=True,
                            text=True)
    # By its cap when the bus bandwidth matches it (the usual case), else by the resends
    # (a loaded machine can hold the exchange below half of even the slow link's rate).
    named = "[slow_link] rank 1's link (eth0) "
    if report.returncode != 0 or named not in report.stdout:
        fail(f"report exited {report.returncode}, expected a line with '{named}':\n"
             f"{report.stdout}{report.stderr}")
    lines = [line for line in report.stdout.splitlines()
             if "slow_link" in line or line.lstrip().startswith(("network", "rank "))]
    print("ok: the report names rank 1's link:\n" + "\n".join(lines))


def main():
    check = subprocess.run([TESTHOSTS, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print(f"SKIP: namespace hosts unavailable here: {check.stderr.strip()}")
        sys.exit(SKIP)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest's timeout: run the teardown
    cases = {"collectives": case_collectives, "losses": case_losses, "linkcut": case_linkcut,
             "sigterm": case_sigterm, "slowlink": case_slowlink}
    with tempfile.TemporaryDirectory(prefix="ringstep_netns_") as tmp:
        cases[CASE](tmp)


if __name__ == "__main__":
    main()
