"""Parsing and bookkeeping for tools/gpu_check.sh (docs/gpu.md, "The GPU check").

Each parsing command prints one line, `STATUS<TAB>DETAIL` (STATUS one of ok, FAIL, WARN,
skip), and with --metrics-out writes the numbers it parsed as one JSON object there. The
bookkeeping commands keep $OUT/results.json current after every stage.

  init META MODE BUDGET GPU COMMIT STAGES            the run's header (results.json's top)
  running META JSONL OUT_JSON NAME BUDGET            results.json: NAME is running now
  record META JSONL OUT_JSON NAME STATUS SECONDS BUDGET DETAIL [METRICS]
                                                     append one stage's row, rewrite results.json
  gtest LOG XML                                      GoogleTest: passed/failed/skipped, failures
  memcheck LOG RC                                    compute-sanitizer's verdict
  losses CPU_RUN CUDA_RUN TOL                        first 10 losses, max |cuda - cpu| <= TOL
  speed RUN LOG [MEMFILE MEMBASE]                    trainer: tok/s, MFU, phases, memory
  bench LOG                                          ringstep_cuda_bench's RESULT and ATTENTION lines
  torch LOG [MEMFILE MEMBASE]                        tools/torch_gpt2_bench.py's RESULT line
  compare METRICS_DIR                                ringstep vs PyTorch eager and compile
  outfiles DIR MAX                                   the files the device tool brings back
  failures METRICS MOST                              a gtest row's failed tests, one a line
"""
import json
import os
import re
import statistics
import sys
import time
import xml.etree.ElementTree as ET

PHASES = ["data", "forward", "backward", "optimizer", "comm_exposed", "other"]
MFU_TARGET = 0.50  # issue 31: MFU >= 50% of the dense bf16 peak
MIB = 1048576.0


def out(status, detail, metrics=None):
    return status, detail, metrics or {}


# ---- bookkeeping ------------------------------------------------------------------------

def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def init(meta, mode, budget, gpu, commit, stages):
    write_json_atomic(meta, {
        "script": "tools/gpu_check.sh", "mode": mode, "gpu": gpu, "commit": commit,
        "started_unix": time.time(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "budget_total_s": int(budget), "stages_planned": stages.split(",") if stages else []})


def rows(jsonl):
    if not os.path.exists(jsonl):
        return []
    with open(jsonl) as f:
        return [json.loads(line) for line in f if line.strip()]


def results(meta, jsonl, running=None):
    with open(meta) as f:
        r = json.load(f)
    r["elapsed_s"] = round(time.time() - r["started_unix"], 1)
    r["stages"] = rows(jsonl)
    r["running"] = running
    r["counts"] = {s: sum(1 for x in r["stages"] if x["status"] == s)
                   for s in ("ok", "FAIL", "WARN", "skip")}
    return r


def running(meta, jsonl, out_json, name, budget):
    write_json_atomic(out_json, results(meta, jsonl, {"name": name, "budget_s": int(budget),
                                                      "since_unix": time.time()}))


def record(meta, jsonl, out_json, name, status, seconds, budget, detail, metrics_file=""):
    metrics = {}
    if metrics_file and os.path.exists(metrics_file):
        try:
            with open(metrics_file) as f:
                metrics = json.load(f)
        except ValueError as e:
            metrics = {"unreadable": str(e)}
    reason = None
    m = re.match(r"\(([^)]*)\)", detail)
    if status == "skip" and m:
        reason = m.group(1)
    row = {"name": name, "status": status, "reason": reason, "detail": detail,
           "seconds": float(seconds), "budget_s": int(budget), "metrics": metrics}
    with open(jsonl, "a") as f:
        f.write(json.dumps(row) + "\n")
    write_json_atomic(out_json, results(meta, jsonl))


# ---- GoogleTest ---------------------------------------------------------------------------

def gtest(log, xml):
    """From the XML when GoogleTest wrote one (it does at the end), else from the log: a
    crash leaves no XML, and the last `[ RUN ]` without a result names the test."""
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    cases = []  # (name, state, message)
    if os.path.exists(xml) and os.path.getsize(xml) > 0:
        try:
            root = ET.parse(xml).getroot()
            for tc in root.iter("testcase"):
                name = f"{tc.get('classname')}.{tc.get('name')}"
                fails = tc.findall("failure") + tc.findall("error")
                if fails:
                    msg = (fails[0].get("message") or fails[0].text or "").strip()
                    cases.append((name, "failed", msg))
                elif tc.find("skipped") is not None or tc.get("result") == "skipped":
                    sk = tc.find("skipped")
                    msg = ((sk.get("message") if sk is not None else "") or "").strip()
                    cases.append((name, "skipped", msg))
                elif tc.get("status", "run") == "run":
                    cases.append((name, "passed", ""))
        except ET.ParseError:
            cases = []
    crashed = None
    if not cases:
        seen = {}
        for line in text.splitlines():
            m = re.match(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] (\S+)", line)
            if not m or "," in m.group(2) or m.group(2).isdigit():
                continue
            state, name = m.group(1), m.group(2)
            seen[name] = {"RUN": "run", "OK": "passed", "FAILED": "failed",
                          "SKIPPED": "skipped"}[state]
        for name, st in seen.items():
            if st == "run":
                crashed = name
                st = "failed"
            msg = ""
            if name == crashed:
                after = text.split(f"] {name}\n", 1)[-1]
                msg = "crashed here (no result line): " + first_lines(after, 3)
            cases.append((name, st, msg))
        # A failing test's message: the lines after its `[ RUN ]` up to `[  FAILED  ]`.
        for i, (name, st, msg) in enumerate(cases):
            if st == "failed" and not msg:
                m = re.search(r"\[ RUN +\] " + re.escape(name) + r"\n(.*?)(?:\[  FAILED  \]|\Z)",
                              text, re.S)
                if m:
                    cases[i] = (name, st, m.group(1).strip())
    n = {s: sum(1 for c in cases if c[1] == s) for s in ("passed", "failed", "skipped")}
    failed = [{"test": c[0], "message": first_lines(c[2], 3)} for c in cases if c[1] == "failed"]
    skip_reasons = sorted({first_lines(c[2], 1) for c in cases if c[1] == "skipped" and c[2]})
    metrics = {"passed": n["passed"], "failed": n["failed"], "skipped": n["skipped"],
               "failed_tests": failed, "skip_reasons": skip_reasons[:5], "crashed_in": crashed}
    detail = f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"
    if crashed:
        detail += f"; CRASHED in {crashed}"
    if failed:
        names = ", ".join(f["test"] for f in failed[:6])
        detail += f"; failed: {names}" + (" ..." if len(failed) > 6 else "")
    elif n["skipped"] and skip_reasons:
        detail += f"; skip reason: {skip_reasons[0][:90]}"
    if not cases:
        return out("FAIL", "no test results (no XML, no result lines in the log)", metrics)
    status = "FAIL" if n["failed"] or crashed else "ok"
    return out(status, detail, metrics)


def first_lines(s, k):
    lines = [ln.strip() for ln in (s or "").splitlines() if ln.strip()]
    return " | ".join(lines[:k])[:300]


def memcheck(log, rc):
    rc = int(rc)
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    refused = re.search(r"(Device not supported|not supported on this (platform|device)|"
                        r"Unable to (find|load|initialize)[^\n]*|Error: [^\n]*(driver|profil|"
                        r"instrument)[^\n]*|error 999[^\n]*)", text, re.I)
    summ = re.search(r"ERROR SUMMARY: (\d+) errors?", text)
    errs = int(summ.group(1)) if summ else None
    tests = len(re.findall(r"^\[ +OK +\] ", text, re.M))
    failed_tests = len(re.findall(r"^\[  FAILED  \] \S+\.\S+", text, re.M))
    kinds = sorted(set(re.findall(r"========= (Invalid [^\n]*?|Uninitialized [^\n]*?|"
                                  r"Program hit [^\n]*?|Leaked [^\n]*?)(?: at |$)", text, re.M)))
    metrics = {"rc": rc, "errors": errs, "tests_ok": tests, "tests_failed": failed_tests,
               "error_kinds": kinds[:8], "refused": refused.group(0)[:200] if refused else None}
    if refused and tests == 0:
        return out("WARN", "compute-sanitizer REFUSED by this runtime (not a finding about "
                   f"our code): {refused.group(0)[:120]}", metrics)
    if errs is None:
        return out("FAIL", f"rc={rc}, no ERROR SUMMARY line ({tests} tests ok)", metrics)
    if errs > 0:
        return out("FAIL", f"{errs} memcheck errors ({', '.join(kinds[:3]) or 'see log'}); "
                   f"{tests} tests ok, {failed_tests} failed", metrics)
    if rc != 0 or failed_tests:
        return out("FAIL", f"0 memcheck errors but rc={rc}: {failed_tests} tests failed under "
                   "the sanitizer", metrics)
    return out("ok", f"0 memcheck errors in {tests} tests", metrics)


# ---- the trainer ------------------------------------------------------------------------

def records(run):
    recs = []
    with open(f"{run}/steps.jsonl") as f:
        for line in f:
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass  # a partly written last line
    return recs


def summary(run):
    with open(f"{run}/summary.json") as f:
        return json.load(f)


def first_ten_losses(run_a, run_b, name_a, name_b):
    """The first 10 losses of two runs, and None; or None, None and the FAIL row where a run
    has no steps.jsonl or fewer than 10 records."""
    try:
        a = [r["loss"] for r in records(run_a)][:10]
        b = [r["loss"] for r in records(run_b)][:10]
    except OSError as e:
        return None, None, out("FAIL", f"no steps.jsonl: {e}")
    if len(a) < 10 or len(b) < 10:
        return None, None, out("FAIL", f"{len(a)} {name_a} and {len(b)} {name_b} losses, "
                               "expected 10 each", {f"{name_a}_losses": a, f"{name_b}_losses": b})
    return a, b, None


def losses(cpu_run, cuda_run, tol):
    """Absolute tolerance on each of the first 10 losses (nats/token), as TrainerCuda's
    EXPECT_NEAR; the relative difference is reported next to it."""
    tol = float(tol)
    a, b, failed = first_ten_losses(cpu_run, cuda_run, "cpu", "cuda")
    if failed:
        return failed
    d = [abs(x - y) for x, y in zip(a, b)]
    rel = [abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)]
    worst = max(range(10), key=lambda i: d[i])
    metrics = {"cpu_losses": a, "cuda_losses": b, "max_abs_diff": max(d),
               "max_rel_diff": max(rel), "worst_step": worst + 1, "tolerance_abs": tol}
    status = "ok" if max(d) <= tol else "FAIL"
    return out(status, f"first 10 fp32 losses: max |cuda-cpu| = {max(d):.2e} at step "
               f"{worst + 1} (abs tol {tol:g}), max rel {max(rel):.1e}", metrics)


def nccl_train(plain_run, nccl_run, tol):
    """comm.backend nccl on one rank against the run without communication (tiny fp32, the
    same seed): the first 10 losses, how many are bitwise equal and the largest difference
    (FAIL above TOL: two cuda runs may differ in the last bits, since weight gradients of the
    embedding, LayerNorm and biases and attention's dq add with atomics); and in every record
    of the NCCL run, comm >= comm_exposed (the profiler's rule; over one rank a bucket's
    comm can round to 0 in the record)."""
    tol = float(tol)
    a, b, failed = first_ten_losses(plain_run, nccl_run, "plain", "nccl")
    if failed:
        return failed
    nrec = records(nccl_run)
    d = [abs(x - y) for x, y in zip(a, b)]
    same = sum(1 for x, y in zip(a, b) if x == y)
    bad_rule = [i + 1 for i, r in enumerate(nrec)
                if r["time_ms"]["comm_exposed"] > r["time_ms"]["comm"]]
    comm = sorted(r["time_ms"]["comm"] for r in nrec)
    metrics = {"plain_losses": a, "nccl_losses": b, "bitwise_equal": same,
               "max_abs_diff": max(d), "tolerance_abs": tol, "rule_broken_steps": bad_rule,
               "comm_ms": [r["time_ms"]["comm"] for r in nrec],
               "comm_exposed_ms": [r["time_ms"]["comm_exposed"] for r in nrec]}
    status = "ok" if max(d) <= tol and not bad_rule else "FAIL"
    return out(status, f"1 NCCL rank vs no comm: {same}/10 losses bitwise equal, max diff "
               f"{max(d):.2e} (tol {tol:g}); comm >= exposed in "
               f"{len(nrec) - len(bad_rule)}/{len(nrec)} records, comm median "
               f"{comm[len(comm) // 2] if comm else 0:.3f} ms"
               + (f", broken at steps {bad_rule[:5]}" if bad_rule else ""), metrics)


def staged(one_run, two_run, tol, on_run, off_run, goal):
    """MPI staging on the one GPU: tiny fp32 on 2 ranks x B against 1 rank x 2B (absolute
    tolerance on each of the first 10 losses), then GPT-2's exposed communication per step
    (median after the first 2) with comm.overlap on against off, judged against GOAL
    (on/off <= 0.5 on the GPU; "none" in the rehearsal, whose CPU ratio means nothing)."""
    tol = float(tol)
    try:
        a = [r["loss"] for r in records(one_run)][:10]
        b = [r["loss"] for r in records(two_run)][:10]
        on = [r["time_ms"]["comm_exposed"] for r in records(on_run)][2:]
        off = [r["time_ms"]["comm_exposed"] for r in records(off_run)][2:]
        on_flight = [r["time_ms"]["comm"] for r in records(on_run)][2:]
    except (OSError, KeyError) as e:
        return out("FAIL", f"a run is missing its records: {e}")
    if len(a) < 10 or len(b) < 10 or not on or not off:
        return out("FAIL", f"{len(a)}, {len(b)} tiny losses (10 each), {len(on)}, {len(off)} "
                   "GPT-2 steps after the first 2", {})
    d = max(abs(x - y) for x, y in zip(a, b))
    med = lambda v: sorted(v)[len(v) // 2]
    ratio = med(on) / med(off) if med(off) > 0 else float("inf")
    metrics = {"one_rank_losses": a, "two_rank_losses": b, "max_abs_diff": d, "tolerance_abs": tol,
               "exposed_ms_overlap_on": med(on), "exposed_ms_overlap_off": med(off),
               "comm_ms_overlap_on": med(on_flight), "exposed_on_over_off": ratio}
    ok = d <= tol and (goal == "none" or ratio <= float(goal))
    return out("ok" if ok else "FAIL",
               f"2 ranks x B vs 1 x 2B: max |diff| {d:.2e} (tol {tol:g}); GPT-2 exposed comm "
               f"{med(on):.1f} ms with overlap, {med(off):.1f} without: {ratio:.2f}x (goal "
               + ("not judged here" if goal == "none" else f"<= {goal}") + ")", metrics)


def size(mib):
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.1f} MiB"


def mem_samples(memfile, membase):
    """Peak of `nvidia-smi --query-gpu=memory.used` samples (MiB) over the run, less the
    reading before it: the process's device memory, CUDA context included."""
    if not memfile or not os.path.exists(memfile):
        return None
    vals = []
    for line in open(memfile, errors="replace"):
        line = line.strip()
        if line.isdigit():
            vals.append(int(line))
    if not vals:
        return None
    base = int(membase) if str(membase).isdigit() else 0
    return {"smi_peak_mib": max(vals) - base, "smi_samples": len(vals), "smi_base_mib": base}


def speed(run, log, memfile="", membase="0"):
    try:
        s = summary(run)
        recs = records(run)
    except OSError as e:
        return out("FAIL", f"no summary.json/steps.jsonl in {run}: {e}")
    steady = recs[s.get("warmup_steps_excluded", 1):] or recs
    med = {}
    for p in PHASES + ["step"]:
        vals = [r["time_ms"][p] for r in steady if p in r.get("time_ms", {})]
        med[p] = statistics.median(vals) if vals else 0.0
    mem = dict(recs[-1].get("mem_bytes", {})) if recs else {}
    header = {}
    text = open(log, errors="replace").read() if log and os.path.exists(log) else ""
    m = re.search(r"memory\s+params ([\d.]+) MiB, grads ([\d.]+) MiB, optimizer ([\d.]+) MiB, "
                  r"activation arena ([\d.]+) MiB reserved(?:, weight copies for the products "
                  r"([\d.]+) MiB)?", text)
    if m:
        header = {k: float(v) if v else 0.0 for k, v in zip(
            ["params_mib", "grads_mib", "optimizer_mib", "arena_reserved_mib",
             "weight_copies_mib"], m.groups())}
    alloc_mib = sum(header.values()) if header else None
    # The activation arena's peak against the model spec's count (the preflight's estimate):
    # on cuda they differ by the backend's scratch only.
    arena = re.search(r"activations: arena peak ([\d.]+) MiB measured; ([\d.]+) MiB predicted", text)
    metrics = {
        "tokens_per_s": s.get("tokens_per_s"), "mfu": s.get("mfu"),
        "peak_gflops": s.get("peak_gflops"), "step_ms_p50": s.get("step_ms_p50"),
        "step_ms_p90": s.get("step_ms_p90"), "final_loss": s.get("final_loss"),
        "steps": s.get("steps"), "steady_steps": len(steady),
        "phase_ms_median": {p: round(med[p], 3) for p in PHASES + ["step"]},
        "activations_peak_bytes": s.get("activations_peak_bytes"),
        "mem_bytes_last_record": mem, "allocations_mib": header,
        "alloc_total_mib": alloc_mib, "precision": s.get("precision"),
    }
    if arena:
        metrics["arena_peak_mib"], metrics["arena_spec_mib"] = map(float, arena.groups())
    # Not written by the trainer yet: the device's own peak, should summary.json gain it.
    if s.get("device_mem_peak_bytes"):
        metrics["device_mem_peak_mib"] = s["device_mem_peak_bytes"] / MIB
    sm = mem_samples(memfile, membase)
    if sm:
        metrics.update(sm)
    mfu = s.get("mfu") or 0.0
    peak = (s.get("peak_gflops") or 0) / 1e3
    short = {"data": "data", "forward": "fwd", "backward": "bwd", "optimizer": "opt",
             "comm_exposed": "comm", "other": "other"}
    phases = " ".join(f"{short[p]} {med[p]:.1f}" for p in PHASES)
    memtxt = f"alloc {size(alloc_mib)}" if alloc_mib else "alloc ?"
    if "device_mem_peak_mib" in metrics:
        memtxt += f", device peak {size(metrics['device_mem_peak_mib'])}"
    if sm:
        memtxt += f", smi peak {size(sm['smi_peak_mib'])}"
    detail = (f"{s.get('tokens_per_s', 0):.0f} tok/s, MFU {100 * mfu:.1f}% of {peak:.1f} "
              f"TFLOP/s, p50 {s.get('step_ms_p50', 0):.1f} ms [{phases}]; mem {memtxt}; "
              f"loss {s.get('final_loss', float('nan')):.3f}")
    if arena:  # last: the table's width may cut it, results.json keeps it
        detail += (f"; arena peak {size(metrics['arena_peak_mib'])}, spec "
                   f"{size(metrics['arena_spec_mib'])}")
    return out("ok", detail, metrics)


RESULT_RE = re.compile(r"^RESULT (.*?): ([0-9.]+) ms/step, ([0-9.]+) tok/s, ([0-9.]+) TFLOP/s, "
                       r"MFU ([0-9.]+)% of ([0-9.]+)", re.M)


ATTENTION_RE = re.compile(r"^ATTENTION (\S+) (\S+) .*: forward ([0-9.]+) ms \(([0-9.]+) TFLOP/s\), "
                          r"backward ([0-9.]+) ms \(([0-9.]+) TFLOP/s\)", re.M)


def bench(log):
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    m = RESULT_RE.search(text)
    if not m:
        sk = re.search(r"^RESULT skipped: (.*)$", text, re.M)
        if sk:
            return out("skip", f"({sk.group(1)})")
        return out("FAIL", "no RESULT line")
    what, ms, tok, tf, mfu, peak = m.groups()
    metrics = {"what": what, "step_ms": float(ms), "tokens_per_s": float(tok),
               "tflops": float(tf), "mfu": float(mfu) / 100, "peak_tflops": float(peak)}
    detail = f"{what}: fwd+bwd {float(ms):.1f} ms, {float(tok):.0f} tok/s, MFU {mfu}%"
    # One layer's fused attention per storage dtype (fp32 SIMT, bf16 and fp16 tensor cores).
    attention = {}
    for dt, kernel, f_ms, f_tf, b_ms, b_tf in ATTENTION_RE.findall(text):
        attention[dt] = {"kernel": kernel, "forward_ms": float(f_ms),
                         "forward_tflops": float(f_tf), "backward_ms": float(b_ms),
                         "backward_tflops": float(b_tf)}
    if attention:
        metrics["attention"] = attention
        detail += "; attention fwd/bwd ms " + ", ".join(
            f"{dt} {a['forward_ms']:.2f}/{a['backward_ms']:.2f}" for dt, a in attention.items())
    return out("ok", detail, metrics)


def torch_result(log, memfile="", membase="0"):
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    js = re.search(r"^RESULT_JSON (\{.*\})$", text, re.M)
    sk = re.search(r"^RESULT skipped: (.*)$", text, re.M)
    if sk:
        return out("skip", f"({sk.group(1)})")
    if not js:
        m = RESULT_RE.search(text)
        if not m:
            return out("FAIL", "no RESULT line")
        what, ms, tok, tf, mfu, peak = m.groups()
        metrics = {"what": what, "step_ms": float(ms), "tokens_per_s": float(tok),
                   "tflops": float(tf), "mfu": float(mfu) / 100}
    else:
        metrics = json.loads(js.group(1))
    sm = mem_samples(memfile, membase)
    if sm:
        metrics.update(sm)
    d = (f"{metrics['what']}: {metrics['tokens_per_s']:.0f} tok/s, {metrics['step_ms']:.1f} "
         f"ms/step, MFU {100 * metrics['mfu']:.1f}%")
    if metrics.get("max_memory_allocated_mib") is not None:
        d += f"; max_memory_allocated {metrics['max_memory_allocated_mib'] / 1024:.2f} GiB"
    if sm:
        d += f", smi peak {sm['smi_peak_mib'] / 1024:.2f} GiB"
    if metrics.get("warmup_s") is not None:
        d += f"; warm-up {metrics['warmup_s']:.1f} s"
    return out("ok", d, metrics)


def compare(metrics_dir):
    def load(name):
        p = os.path.join(metrics_dir, name + ".json")
        try:
            with open(p) as f:
                m = json.load(f)
            return m if m.get("tokens_per_s") else None
        except (OSError, ValueError):
            return None
    ours, eager, comp = load("gpt2"), load("torch_eager"), load("torch_compile")
    if not ours:
        return out("skip", "(no gpt2 numbers) the trainer row did not produce tokens/s")
    metrics = {"ringstep_tokens_per_s": ours["tokens_per_s"], "ringstep_mfu": ours.get("mfu"),
               "mfu_target": MFU_TARGET}
    parts = [f"ringstep {ours['tokens_per_s']:.0f} tok/s"]
    below = []
    for label, t in (("eager", eager), ("compile", comp)):
        if t:
            r = ours["tokens_per_s"] / t["tokens_per_s"]
            metrics[f"vs_{label}"] = round(r, 4)
            metrics[f"{label}_tokens_per_s"] = t["tokens_per_s"]
            parts.append(f"{r:.2f}x {label} ({t['tokens_per_s']:.0f})")
        else:
            parts.append(f"no {label} number")
    if eager and ours["tokens_per_s"] < eager["tokens_per_s"]:
        below.append("slower than eager")
    mfu = ours.get("mfu") or 0.0
    parts.append(f"MFU {100 * mfu:.1f}% vs target {100 * MFU_TARGET:.0f}%")
    if mfu < MFU_TARGET:
        below.append("MFU under target")
    # Memory: ringstep's own cudaMallocs (header) against PyTorch's max_memory_allocated;
    # nvidia-smi's sampled peak for both where there is one (CUDA context included).
    mem = []
    a = ours.get("alloc_total_mib")
    if a:
        metrics["ringstep_alloc_mib"] = a
        mem.append(f"ringstep {size(a)}")
    for label, t in (("eager", eager), ("compile", comp)):
        if t and t.get("max_memory_allocated_mib") is not None:
            metrics[f"{label}_max_memory_allocated_mib"] = t["max_memory_allocated_mib"]
            mem.append(f"{label} {size(t['max_memory_allocated_mib'])}")
            if a:
                metrics[f"mem_vs_{label}"] = round(a / max(t["max_memory_allocated_mib"], 1e-9), 4)
    smi = [f"{k} {size(m['smi_peak_mib'])}" for k, m in
           (("ringstep", ours), ("eager", eager), ("compile", comp)) if m and "smi_peak_mib" in m]
    for k, m in (("ringstep", ours), ("eager", eager), ("compile", comp)):
        if m and "smi_peak_mib" in m:
            metrics[f"{k}_smi_peak_mib"] = m["smi_peak_mib"]
    if mem:
        parts.append("alloc: " + ", ".join(mem))
    if smi:
        parts.append("smi peak: " + ", ".join(smi))
    metrics["below_target"] = below
    status = "WARN" if below else "ok"
    if not eager and not comp:
        status = "skip"
        parts.insert(0, "(no PyTorch numbers)")
    detail = "; ".join(parts) + (f"; BELOW TARGET: {', '.join(below)}" if below else "")
    return out(status, detail, metrics)


def outfiles(d, most):
    """The device tool brings back at most 8 files, 2 folders deep, names of letters,
    digits, '.', '_' and '-'; the check keeps itself to MOST (6)."""
    most = int(most)
    files, bad = [], []
    for base, dirs, names in os.walk(d):
        for n in names + [x for x in dirs]:
            rel = os.path.relpath(os.path.join(base, n), d)
            if not re.fullmatch(r"[A-Za-z0-9._-]+", n):
                bad.append(f"{rel} (name)")
        for n in names:
            p = os.path.join(base, n)
            rel = os.path.relpath(p, d)
            files.append(rel)
            if rel.count(os.sep) > 0:
                bad.append(f"{rel} (in a folder)")
            if os.path.getsize(p) > 16 * MIB:
                bad.append(f"{rel} (over 16 MiB)")
    files.sort()
    metrics = {"files": files, "count": len(files), "limit": most, "problems": bad}
    total = sum(os.path.getsize(os.path.join(d, f)) for f in files)
    detail = (f"{len(files)} files (limit {most}), {total / MIB:.2f} MiB: {' '.join(files)}")
    if len(files) > most or bad:
        return out("FAIL", detail + ("; " + ", ".join(bad) if bad else ""), metrics)
    return out("ok", detail, metrics)


def failures(metrics_file, most):
    """The failed tests of a gtest row, one line each (printed under the row)."""
    with open(metrics_file) as f:
        failed = json.load(f).get("failed_tests", [])
    for t in failed[:int(most)]:
        print(f"FAILED {t['test']}: {t['message'][:200]}")
    if len(failed) > int(most):
        print(f"... {len(failed) - int(most)} more in results.json")


COMMANDS = {"gtest": gtest, "memcheck": memcheck, "losses": losses, "staged": staged,
            "nccl_train": nccl_train,
            "speed": speed,
            "bench": bench, "torch": torch_result, "compare": compare, "outfiles": outfiles}


def main(argv):
    metrics_out = None
    if "--metrics-out" in argv:
        i = argv.index("--metrics-out")
        metrics_out = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    cmd, args = argv[0], argv[1:]
    if cmd == "init":
        return init(*args)
    if cmd == "running":
        return running(*args)
    if cmd == "record":
        return record(*args)
    if cmd == "failures":
        return failures(*args)
    try:
        status, detail, metrics = COMMANDS[cmd](*args)
    except Exception as e:  # a parser bug must still give the row a status
        status, detail, metrics = "FAIL", f"gpu_check_report.py {cmd}: {type(e).__name__}: {e}", {}
    if metrics_out:
        write_json_atomic(metrics_out, metrics)
    print(f"{status}\t{detail}")


if __name__ == "__main__":
    main(sys.argv[1:])
