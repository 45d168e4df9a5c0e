"""What the Python tests share to drive ringstep as a subprocess: a process group started and
finished (killed whole on a timeout), and a run's steps.jsonl read and waited on."""
import json
import os
import signal
import subprocess
import sys
import time


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def start(args, env, cwd=None):
    """ARGS in a new session (its own process group), stdout and stderr merged."""
    return subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc, timeout):
    """(exit status, output); after TIMEOUT seconds the whole group is killed and the test fails."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        fail(f"still running after {timeout} s:\n{out}")
    return proc.returncode, out


def run(args, env, cwd=None, timeout=240):
    """The output of ARGS, which must exit 0."""
    rc, out = finish(start(args, env, cwd), timeout)
    if rc != 0:
        fail(f"{' '.join(args)} exited {rc}:\n{out}")
    return out


def records(run_dir):
    """RUN_DIR's step records; a torn record fails here."""
    with open(os.path.join(run_dir, "steps.jsonl")) as f:
        return [json.loads(line) for line in f]


def losses(run_dir):
    return [(r["step"], r["loss"]) for r in records(run_dir)]


def step_count(run_dir):
    """Lines in RUN_DIR's steps.jsonl so far (0 before it exists)."""
    try:
        with open(os.path.join(run_dir, "steps.jsonl")) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def wait_for_steps(run_dir, n, proc, poll_s=0.005):
    """Until RUN_DIR has N step records; fails if PROC ends first."""
    while step_count(run_dir) < n:
        if proc.poll() is not None:
            fail(f"the run ended before step {n}:\n{proc.communicate()[0]}")
        time.sleep(poll_s)


def committed_stop(out, run_dir, steps):
    """The step a signal stopped RUN_DIR's run at (its "stopped by a signal" line in OUT) and
    that step's checkpoint, which must be committed before the run's last step."""
    stopped = int(out.split("stopped by a signal after step ")[1].split(";")[0])
    ckpt = os.path.join(run_dir, "checkpoints", f"step-{stopped}")
    if not os.path.exists(os.path.join(ckpt, "manifest.json")) or stopped >= steps:
        fail(f"no committed checkpoint at {ckpt} (stopped at {stopped} of {steps})")
    return stopped, ckpt


def expect_resumed_bit_exact(out, ckpt, stopped, straight, split):
    """OUT, a rerun of SPLIT, resumed from CKPT, and SPLIT's loss curve is STRAIGHT's."""
    if f"resuming from {ckpt} (step {stopped})" not in out:
        fail(f"the rerun did not resume from {ckpt}:\n{out}")
    a, b = losses(straight), losses(split)
    if a != b:
        fail(f"loss curves differ:\nstraight {a}\nresumed  {b}")
