#!/usr/bin/env python3
"""Plot a ringstep run directory: where each step's time went, and the loss.

    tools/plot_steps.py RUN_DIR [--out FILE.png]

Writes a two-panel PNG (default RUN_DIR/steps.png):
  top     the step time stacked by phase (data, forward, backward, optimizer,
          comm_exposed, other: they sum to the step, docs/logs.md "sum rule"), with the
          communication in flight (it may overlap compute) as a dashed line and the
          warm-up steps that `ringstep report` leaves out shaded;
  bottom  the training loss per step, the held-out loss where it was measured, skipped
          steps, and the entropy floor of the synthetic data (dashed) when known.

Needs matplotlib. Debian's python3-matplotlib is installed for /usr/bin/python3; when the
`python3` on PATH lacks it, the script re-runs itself with /usr/bin/python3.
"""

import argparse
import json
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
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


def warmup_excluded(steps):
    """Same rule as `ringstep report` (train/report.cpp)."""
    return max(0, min(max(1, min(5, steps // 10)), steps - 1))


def plot(run_dir, records, summary, out, plt):
    from matplotlib.ticker import MaxNLocator

    steps = [r["step"] for r in records]
    t = lambda key: [float(r["time_ms"].get(key, 0.0)) for r in records]
    fig, (ax_t, ax_l) = plt.subplots(2, 1, figsize=(12, 8), sharex=True,
                                     gridspec_kw={"height_ratios": [3, 2]})

    # Step n is drawn as the bar [n - 0.5, n + 0.5]: one edge more than there are steps.
    edges = [s - 0.5 for s in steps] + [steps[-1] + 0.5]
    ax_t.stackplot(edges, *[v + v[-1:] for v in (t(key) for key, _, _ in PHASES)],
                   labels=[l for _, l, _ in PHASES], colors=[c for _, _, c in PHASES],
                   step="post", linewidth=0)
    comm = t("comm")
    if any(c > 0 for c in comm):
        ax_t.plot(edges, comm + comm[-1:], "--", drawstyle="steps-post", color="#8172b2",
                  linewidth=1.2, zorder=4, label="comm in flight")
    warm = warmup_excluded(len(records))
    if warm > 0:
        ax_t.axvspan(steps[0] - 0.5, steps[warm - 1] + 0.5, facecolor="white", alpha=0.55,
                     edgecolor="black", linestyle=":", zorder=3, label="warm-up (left out\nby report)")
    world = summary.get("world") or records[-1].get("ranks", {}).get("world", 1)
    title = "%s: step time by phase (%d rank%s, slowest rank's times)" % (
        os.path.basename(os.path.normpath(run_dir)), world, "" if world == 1 else "s")
    ax_t.set_title(title)
    ax_t.set_ylabel("ms per step")
    # The warm-up steps may be several times longer: let them run off the top.
    ax_t.set_ylim(0, 1.3 * max(t("step")[warm:]))
    ax_t.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax_t.grid(axis="y", alpha=0.3)

    ax_l.plot(steps, [r["loss"] for r in records], color="#4c72b0", linewidth=1.3,
              label="train loss")
    val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    if summary.get("final_val_loss") is not None:
        val.append((steps[-1], summary["final_val_loss"]))
    if val:
        ax_l.plot(*zip(*val), "o", color="#dd8452", markersize=5, label="val loss")
    skipped = [(r["step"], r["loss"]) for r in records if r.get("skipped")]
    if skipped:
        ax_l.plot(*zip(*skipped), "x", color="#c44e52", markersize=7, label="skipped step")
    floor = summary.get("entropy_floor")
    if floor is not None:
        ax_l.axhline(floor, linestyle="--", color="black", linewidth=1,
                     label="entropy floor %.3f" % floor)
    ax_l.set_xlabel("step")
    ax_l.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_l.set_ylabel("loss (nats/token)")
    ax_l.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax_l.grid(alpha=0.3)

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
