"""The trainer rows of tools/gpu_check.sh's table, from run directories (steps.jsonl,
summary.json; docs/logs.md) and the PyTorch benchmark's RESULT line. Each command prints one
line: a status word (ok / FAIL) where the row has one, then the detail.
    gpu_check_report.py losses CPU_RUN CUDA_RUN TOL   first 10 losses, max |cuda - cpu| <= TOL
    gpu_check_report.py speed RUN                     "tokens/s, MFU | step breakdown"
    gpu_check_report.py versus RUN TORCH_LOG          trainer tokens/s over PyTorch eager's
"""
import json
import re
import statistics
import sys

PHASES = ["data", "forward", "backward", "optimizer", "comm_exposed", "other"]


def records(run):
    with open(f"{run}/steps.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(run):
    with open(f"{run}/summary.json") as f:
        return json.load(f)


def losses(cpu_run, cuda_run, tol):
    a = [r["loss"] for r in records(cpu_run)][:10]
    b = [r["loss"] for r in records(cuda_run)][:10]
    if len(a) < 10 or len(b) < 10:
        return f"FAIL {len(a)} cpu and {len(b)} cuda losses, expected 10 each"
    d = max(abs(x - y) for x, y in zip(a, b))
    status = "ok" if d <= float(tol) else "FAIL"
    return f"{status} first 10 fp32 losses: max |cuda - cpu| = {d:.2e} (tolerance {tol})"


def speed(run):
    s = summary(run)
    steady = records(run)[s["warmup_steps_excluded"]:]
    med = {p: statistics.median(r["time_ms"][p] for r in steady) for p in PHASES + ["step"]}
    head = (f"{s['tokens_per_s']:.0f} tok/s, MFU {100 * s['mfu']:.1f}% of "
            f"{s['peak_gflops'] / 1e3:.1f} TFLOP/s, step p50 {s['step_ms_p50']:.1f} ms, "
            f"final loss {s['final_loss']:.3f}")
    phases = " ".join(f"{p} {med[p]:.1f}" for p in PHASES)
    return f"{head}|ms (median of {len(steady)} steps): {phases} = step {med['step']:.1f}"


def versus(run, torch_log):
    ours = summary(run)["tokens_per_s"]
    m = None
    with open(torch_log) as f:
        for line in f:
            m = m or re.search(r"^RESULT .*?([0-9.]+) tok/s", line)
    if not m:
        return "FAIL no RESULT line in " + torch_log
    theirs = float(m.group(1))
    status = "ok" if ours >= theirs else "SLOWER"
    return f"{status} trainer {ours:.0f} tok/s / PyTorch eager {theirs:.0f} tok/s = {ours / theirs:.2f}"


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    print({"losses": losses, "speed": speed, "versus": versus}[cmd](*args))
