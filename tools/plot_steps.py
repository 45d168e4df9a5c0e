#!/usr/bin/env python3
"""Plot a ringstep run directory: where each step's time went, and the loss.

    tools/plot_steps.py RUN_DIR [--out FILE.png]

Writes a four-panel PNG (default RUN_DIR/steps.png):
  1  the step time stacked by phase (data, forward, backward, optimizer, comm_exposed,
     other: they sum to the step, docs/logs.md "sum rule"), with the warm-up steps that
     `ringstep report` leaves out shaded;
  2  the small phases on a log axis, so that they stay visible next to a long step: data,
     optimizer, comm exposed, other, and the communication in flight (it may overlap
     compute), each as the median of a window of steps;
  3  throughput: tokens/s (left axis) and MFU (right axis), per step;
  4  the loss: with a known entropy floor (synthetic data), the gap to it on a log axis
     (train, and held-out where measured), else the loss itself; skipped steps marked.

Needs matplotlib. Debian's python3-matplotlib is installed for /usr/bin/python3; when the
`python3` on PATH lacks it, the script re-runs itself with /usr/bin/python3.
"""

import argparse
import json
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
SMALL = [  # (field of time_ms, label, colour): the phases panel 2 draws on a log axis
    ("data", "data", "#8c8c8c"),
    ("optimizer", "optimizer", "#ccb974"),
    ("comm_exposed", "comm exposed", "#c44e52"),
    ("comm", "comm in flight", "#8172b2"),
    ("other", "other", "#555555"),
]
PHASES = [  # (field of time_ms, label, colour)
    ("data", "data", "#8c8c8c"),
    ("forward", "forward", "#4c72b0"),
    ("backward", "backward", "#55a868"),
    ("optimizer", "optimizer", "#ccb974"),
    ("comm_exposed", "comm exposed", "#c44e52"),
    ("other", "other", "#dddddd"),
]


def import_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        pass
    here = os.path.realpath(sys.executable)
    if (os.path.exists(SYSTEM_PYTHON) and here != os.path.realpath(SYSTEM_PYTHON)
            and not os.environ.get("RINGSTEP_PLOT_REEXEC")):
        os.environ["RINGSTEP_PLOT_REEXEC"] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(
        "plot_steps.py: matplotlib is not installed for %s.\n"
        "  Debian/Ubuntu: sudo apt-get install python3-matplotlib, then run\n"
        "    /usr/bin/python3 tools/plot_steps.py RUN_DIR\n"
        "  or: %s -m pip install matplotlib" % (sys.executable, sys.executable))


def fail(message):
    print("plot_steps.py: error: " + message, file=sys.stderr)
    sys.exit(2)


def read_steps(path):
    """Step records; a partly written last line is skipped with a warning (as `report`)."""
    if not os.path.isfile(path):
        fail("'%s' not found: is the directory a ringstep run directory?" % path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            rec["time_ms"]["step"]
        except (ValueError, KeyError, TypeError) as e:
            if i == len(lines) - 1:
                print("plot_steps.py: warning: %s:%d: skipped a partly written last line"
                      % (path, i + 1), file=sys.stderr)
                continue
            fail("%s:%d: invalid step record: %s" % (path, i + 1, e))
        records.append(rec)
    if not records:
        fail("%s: no step records" % path)
    return records


def read_summary(path):
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except ValueError as e:
            fail("%s: invalid JSON: %s" % (path, e))


def warmup_excluded(steps, summary):
    """The summary's count (core/stats.h's rule, which `ringstep report` applies to the
    same records); for an unfinished run, that rule restated."""
    if isinstance(summary.get("warmup_steps_excluded"), int) and summary.get("steps") == steps:
        return summary["warmup_steps_excluded"]
    return max(0, min(max(1, min(5, steps // 10)), steps - 1))


def rolling_median(values, window):
    """The median of each value's trailing WINDOW (fewer at the start)."""
    out = []
    for i in range(len(values)):
        part = sorted(values[max(0, i - window + 1):i + 1])
        n = len(part)
        out.append(part[n // 2] if n % 2 else 0.5 * (part[n // 2 - 1] + part[n // 2]))
    return out


def plot(run_dir, records, summary, out, plt):
    from matplotlib.ticker import MaxNLocator

    steps = [r["step"] for r in records]
    t = lambda key: [float(r["time_ms"].get(key, 0.0)) for r in records]
    fig, (ax_t, ax_s, ax_p, ax_l) = plt.subplots(
        4, 1, figsize=(12, 13), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2, 2]})
    warm = warmup_excluded(len(records), summary)

    # 1. Step n is drawn as the bar [n - 0.5, n + 0.5]: one edge more than there are steps.
    edges = [s - 0.5 for s in steps] + [steps[-1] + 0.5]
    ax_t.stackplot(edges, *[v + v[-1:] for v in (t(key) for key, _, _ in PHASES)],
                   labels=[l for _, l, _ in PHASES], colors=[c for _, _, c in PHASES],
                   step="post", linewidth=0)
    for ax in (ax_t, ax_s, ax_p):
        if warm > 0:
            ax.axvspan(steps[0] - 0.5, steps[warm - 1] + 0.5, facecolor="white", alpha=0.55,
                       edgecolor="black", linestyle=":", zorder=3,
                       label="warm-up (left out\nby report)" if ax is ax_t else None)
    world = summary.get("world") or records[-1].get("ranks", {}).get("world", 1)
    title = "%s: step time by phase (%d rank%s, slowest rank's times)" % (
        os.path.basename(os.path.normpath(run_dir)), world, "" if world == 1 else "s")
    ax_t.set_title(title)
    ax_t.set_ylabel("ms per step")
    # The warm-up steps may be several times longer: let them run off the top.
    ax_t.set_ylim(0, 1.3 * max(t("step")[warm:]))
    ax_t.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax_t.grid(axis="y", alpha=0.3)

    # 2. The small phases, smoothed over ~1/50 of the run, on a log axis (0 is left out).
    window = max(1, len(records) // 50)
    for key, label, colour in SMALL:
        values = rolling_median(t(key), window)
        if any(v > 0 for v in values):
            ax_s.plot(steps, [v if v > 0 else float("nan") for v in values],
                      "--" if key == "comm" else "-", color=colour, linewidth=1.2, label=label)
    ax_s.set_yscale("log")
    ax_s.set_ylabel("ms per step\n(median of %d)" % window)
    ax_s.set_title("the small phases and communication (log scale)", fontsize=10)
    ax_s.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax_s.grid(alpha=0.3, which="both")

    # 3. Throughput and MFU.
    tok = [float(r.get("tokens_per_s", 0.0)) for r in records]
    ax_p.plot(steps, tok, color="#4c72b0", linewidth=1.0, label="tokens/s")
    ax_p.set_ylabel("tokens/s")
    ax_p.set_ylim(0, 1.3 * max(tok[warm:] or tok))
    ax_m = ax_p.twinx()
    mfu = [100.0 * float(r.get("mfu", 0.0)) for r in records]
    ax_m.plot(steps, mfu, color="#dd8452", linewidth=1.0, label="MFU")
    ax_m.set_ylabel("MFU (%)")
    ax_m.set_ylim(0, max(100.0, 1.1 * max(mfu[warm:] or mfu)))
    handles = ax_p.get_legend_handles_labels()[0] + ax_m.get_legend_handles_labels()[0]
    ax_p.legend(handles, [h.get_label() for h in handles], loc="upper left",
                bbox_to_anchor=(1.06, 1), fontsize=8)
    ax_p.set_title("throughput (per rank's MFU, docs/metrics.md)", fontsize=10)
    ax_p.grid(alpha=0.3)

    # 4. The loss, or its gap to the entropy floor on a log axis.
    floor = summary.get("entropy_floor")
    shift = floor if floor is not None else 0.0
    # A non-finite loss is written as null: no point.
    gap = lambda v: v - shift if v is not None and v - shift > 0 else float("nan")
    ax_l.plot(steps, [gap(r["loss"]) for r in records], color="#4c72b0", linewidth=1.3,
              label="train loss" + (" - floor" if floor is not None else ""))
    val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    if summary.get("final_val_loss") is not None:
        val.append((steps[-1], summary["final_val_loss"]))
    if val:
        ax_l.plot([s for s, _ in val], [gap(v) for _, v in val], "o", color="#dd8452",
                  markersize=5, label="val loss" + (" - floor" if floor is not None else ""))
    skipped = [(r["step"], r["loss"]) for r in records if r.get("skipped")]
    if skipped:
        ax_l.plot([s for s, _ in skipped], [gap(v) for _, v in skipped], "x", color="#c44e52",
                  markersize=7, label="skipped step")
    if floor is not None:
        ax_l.set_yscale("log")
        ax_l.set_ylabel("loss - floor (nats/token)")
        ax_l.set_title("gap to the entropy floor %.4f nats/token (log scale)" % floor,
                       fontsize=10)
    else:
        ax_l.set_ylabel("loss (nats/token)")
    ax_l.set_xlabel("step")
    ax_l.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_l.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax_l.grid(alpha=0.3, which="both")

    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote %s" % out)


def main():
    parser = argparse.ArgumentParser(description="Plot a ringstep run directory as a PNG.")
    parser.add_argument("run_dir", help="run directory (holds steps.jsonl)")
    parser.add_argument("--out", help="PNG to write (default RUN_DIR/steps.png)")
    args = parser.parse_args()
    plt = import_pyplot()
    if not os.path.isdir(args.run_dir):
        fail("run directory '%s' not found" % args.run_dir)
    records = read_steps(os.path.join(args.run_dir, "steps.jsonl"))
    summary = read_summary(os.path.join(args.run_dir, "summary.json"))
    plot(args.run_dir, records, summary, args.out or os.path.join(args.run_dir, "steps.png"), plt)


if __name__ == "__main__":
    main()
