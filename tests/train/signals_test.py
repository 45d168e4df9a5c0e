#!/usr/bin/env python3
"""Signals and crashes against a real `ringstep train` under mpirun (ctest: train_signals.*).

  sigterm    SIGTERM to one rank of a 2-rank run: every rank finishes the step, a checkpoint
             is committed, mpirun exits 0 naming it; rerunning resumes and the whole loss
             curve (steps.jsonl) equals, bit for bit, that of a run never stopped.
  twice      A second SIGTERM during the step exits at once with 128 + 15, before the
             first one's checkpoint is written.
  sigkill    SIGKILL of the writing rank while a checkpoint is being written (a step-N.tmp
             directory exists): the previous checkpoint verifies and the rerun resumes from
             it and finishes. Repeated at several points of the write.

Usage: signals_test.py RINGSTEP MPIEXEC CASE
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import run_tools  # noqa: E402
from run_tools import (committed_stop, expect_resumed_bit_exact, fail,  # noqa: E402
                       wait_for_steps)

RINGSTEP, MPIEXEC, CASE = sys.argv[1:4]
NP = 2
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def command(run_dir, steps, extra=()):
    sets = [f"run.out_dir={run_dir}", f"train.steps={steps}", "run.threads=1",
            "train.eval_every=0", "train.eval_batches=1", "train.schedule=constant",
            "profile.peak_gflops=100", "profile.log_every=1", *extra]
    args = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", str(NP), RINGSTEP, "train",
            "configs/tiny.yaml"]
    for s in sets:
        args += ["--set", s]
    return args


def start(args):
    return run_tools.start(args, ENV)


def finish(proc, timeout=240):
    return run_tools.finish(proc, timeout)


def run(args):
    return run_tools.run(args, ENV)


def ranks_of(mpirun):
    """The pids of mpirun's rank processes, in rank order (launch order)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with open(f"/proc/{mpirun.pid}/task/{mpirun.pid}/children") as f:
                pids = sorted(int(p) for p in f.read().split())
        except OSError:
            pids = []
        if len(pids) == NP:
            return pids
        time.sleep(0.01)
    fail("mpirun did not start its ranks")


def case_sigterm(tmp):
    steps, small = 24, ["checkpoint.every=1000", "train.micro_batch=4"]
    straight = os.path.join(tmp, "straight")
    run(command(straight, steps, small))
    split = os.path.join(tmp, "split")
    proc = start(command(split, steps, small))
    ranks = ranks_of(proc)
    wait_for_steps(split, 5, proc)
    os.kill(ranks[-1], signal.SIGTERM)  # one rank only: the ranks must agree
    rc, out = finish(proc)
    if rc != 0 or "stopped by a signal after step" not in out:
        fail(f"SIGTERM: exit {rc}, expected 0 and the stop line:\n{out}")
    stopped, ckpt = committed_stop(out, split, steps)
    out = run(command(split, steps, small))
    expect_resumed_bit_exact(out, ckpt, stopped, straight, split)
    print(f"ok: SIGTERM to rank {NP - 1} stopped after step {stopped}, checkpoint committed, "
          f"{steps} steps resumed bit-exact")


def case_twice(tmp):
    # Steps long enough (about a second on one core) that two signals land in one step.
    run_dir = os.path.join(tmp, "twice")
    big = ["checkpoint.every=1000", "model.d_model=384", "model.n_layers=6",
           "model.n_heads=6", "train.micro_batch=8"]
    proc = start(command(run_dir, 1000, big))
    ranks = ranks_of(proc)
    wait_for_steps(run_dir, 2, proc)
    t0 = time.time()
    os.kill(ranks[0], signal.SIGTERM)
    time.sleep(0.02)
    os.kill(ranks[0], signal.SIGTERM)
    rc, out = finish(proc)
    elapsed = time.time() - t0
    if rc == 0 or "stopped by a signal" in out:
        fail(f"a second SIGTERM must exit at once, without the checkpoint (exit {rc}):\n{out}")
    if os.path.exists(os.path.join(run_dir, "checkpoints")) and any(
            not n.endswith(".tmp") for n in os.listdir(os.path.join(run_dir, "checkpoints"))):
        fail("a checkpoint was committed after the second signal")
    print(f"ok: the second SIGTERM ended the job in {elapsed:.2f} s with exit {rc}, "
          "no checkpoint written")


def case_sigkill(tmp):
    # About 3.3M parameters: some 40 MB per checkpoint, a write that takes a while.
    big = ["model.d_model=256", "model.n_layers=4", "train.micro_batch=1",
           "train.grad_accum_steps=1", "checkpoint.every=1", "checkpoint.keep=2"]
    for delay_ms in (0, 3, 15):
        run_dir = os.path.join(tmp, f"kill{delay_ms}")
        ckpts = os.path.join(run_dir, "checkpoints")
        proc = start(command(run_dir, 1000, big))
        ranks = ranks_of(proc)
        writing = None
        while writing is None:
            if proc.poll() is not None:
                fail(f"the run ended:\n{proc.communicate()[0]}")
            names = os.listdir(ckpts) if os.path.isdir(ckpts) else []
            committed = [n for n in names if not n.endswith(".tmp")]
            tmp_dirs = [n for n in names if n.endswith(".tmp")]
            if committed and tmp_dirs:
                writing = tmp_dirs[0]
        time.sleep(delay_ms / 1e3)
        os.kill(ranks[0], signal.SIGKILL)  # rank 0 writes the checkpoint
        rc, out = finish(proc)
        if rc == 0:
            fail("mpirun exited 0 after a rank was killed")
        stepped = sorted(int(n[5:]) for n in os.listdir(ckpts) if not n.endswith(".tmp"))
        # Rerun: it must resume from a checkpoint that verifies and train on to the end.
        steps = stepped[-1] + 2 if stepped else 2
        out = run(command(run_dir, steps, big))
        resumed = [l for l in out.splitlines() if l.startswith("resuming from")]
        want = os.path.join(ckpts, f"step-{stepped[-1]}") if stepped else None
        if not resumed or want not in resumed[0]:
            fail(f"the rerun did not resume from the newest committed checkpoint {want}:\n{out}")
        print(f"ok: SIGKILL {delay_ms} ms into writing {writing}; committed {stepped}; "
              f"rerun {resumed[0]!r} and finished {steps} steps")


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    with tempfile.TemporaryDirectory(prefix="ringstep_signals_") as tmp:
        {"sigterm": case_sigterm, "twice": case_twice, "sigkill": case_sigkill}[CASE](tmp)


if __name__ == "__main__":
    main()
