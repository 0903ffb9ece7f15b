"""Markdown report and bar chart from pytest-benchmark's JSON.

    pytest bench --benchmark-only --benchmark-json=bench.json
    python bench/report.py bench.json                  # Markdown on stdout, bench.png
    python bench/report.py bench.json --out report.md --png chart.png

The Markdown has the run's date, machine and library versions, one table of ratios
(each peer's median over tapejit's, per group: above 1 means tapejit is faster or
smaller), the targets (SPEC.md section 5's and the replay groups') with their
verdicts, and the groups that have no tapejit-vs-peer ratio (cost vs tape length, JAX
compile times, batched replay on 1 and 2 threads).  The PNG (needs
matplotlib: ``pip install -e ".[bench]"``) draws the same ratios as bars on a log scale.

Only the standard library is needed for the Markdown, so the report can be made on any
machine from a JSON file copied off the benchmark machine.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import targets as T

#: column order of the ratio table; peers not listed here follow in the order seen
PEER_ORDER = ("tapejit", "tapejit_recorded", "tapejit_eager", "interpreter", "c_interpreter", "torch", "jax",
              "autograd", "numpy", "scipy", "python")
PEER_NOTES = {
    "tapejit_eager": ("tapejit_eager: tapejit's eager API, in the replay groups, where `tapejit` is the "
                      "`tj.compile` replay"),
    "interpreter": ("interpreter: a hand-written tape interpreter (Numba) on the replay's own arrays "
                    "(`bench/interpreter.py`)"),
    "tapejit_recorded": ("tapejit_recorded: the `tj.compile` replay of the trace as recorded, without the "
                         "frozen-tape optimisation (`tapejit/replay/optimize.py`)"),
    "c_interpreter": ("c_interpreter: a C switch interpreter (`cc -O3`) over one record per source-level op "
                      "of workload A (`bench/c_interpreter.c`)"),
    "jax": "jax: `jax.jit` compiled ahead of time, run times only (compile times below)",
    "autograd": "autograd: HIPS autograd, traced in Python every call",
    "numpy": "numpy: the hand-written NumPy gradient (B, C), no autograd at all",
    "scipy": "scipy: `scipy.optimize.rosen_der`",
    "python": "python: the hand-written reverse sweep of workload A in Python floats",
}
#: extra_info keys shown next to a row in the table of other groups
NOTE_KEYS = ("us_per_op", "per_op_vs_1000_ops", "ns_per_record", "records", "records_traced", "us_per_row",
             "in_process_s",
             "bytes_per_op", "rss_growth_mb", "workload_mb", "baseline_mb", "peak_mb")


def load(path):
    with open(path) as f:
        return json.load(f)


def rows_of(data):
    """``(group, label, stats, extra_info)`` per benchmark in the JSON (``targets.labelled``)."""
    return T.labelled([(b.get("group") or b["name"], b.get("params") or {}, b["stats"],
                        b.get("extra_info") or {}) for b in data["benchmarks"]])


def fmt_value(value, group):
    if value is None:
        return "–"
    return T.human(value, group)


def fmt_ratio(ratio):
    return f"{ratio:.3g}" if ratio >= 0.01 else f"{ratio:.2g}"


def ratio_groups(table):
    """Groups with a tapejit row and at least one peer row (labels without extra params)."""
    return {g: rows for g, rows in table.items()
            if "tapejit" in rows and len(_peers(rows)) > 1}


def _peers(rows):
    """Labels of rows parametrised by peer alone (``row_label`` adds the other params)."""
    return [label for label in rows if " " not in label]


def peer_columns(groups):
    seen = []
    for rows in groups.values():
        seen += [p for p in _peers(rows) if p not in seen]
    return [p for p in PEER_ORDER if p in seen] + [p for p in seen if p not in PEER_ORDER]


def ratio_table(groups):
    """Markdown: per group, tapejit's figure and each peer's figure with peer/tapejit."""
    columns = peer_columns(groups)
    lines = ["| group | " + " | ".join(columns) + " |",
             "|---|" + "---|" * len(columns)]
    for group, rows in groups.items():
        base = rows["tapejit"]
        cells = []
        for peer in columns:
            value = rows.get(peer)
            if value is None:
                cells.append("–")
            elif peer == "tapejit":
                cells.append(f"**{fmt_value(value, group)}**")
            else:
                ratio = value / base if base else math.inf
                cells.append(f"{fmt_value(value, group)} (×{fmt_ratio(ratio)})")
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    return lines


def target_table(medians, means):
    lines = ["| group | target | median | mean |", "|---|---|---|---|"]
    for by_median, by_mean in zip(T.evaluate_all(medians), T.evaluate_all(means)):
        t = by_median.target
        verdict = {True: "met", False: "**NOT met**", None: "not measured"}[by_median.met]
        lines.append(f"| {t.group} | {t.text} | {verdict}: {by_median.detail} | {by_mean.detail} |")
    return lines


def other_table(rows, groups_with_ratios):
    """Markdown rows for every benchmark whose group has no ratio (or has extra params)."""
    lines = ["| group | row | median | min | notes |", "|---|---|---|---|---|"]
    found = False
    for group, label, stats, extra in rows:
        if group in groups_with_ratios and " " not in label:
            continue
        found = True
        median = T.figure(group, stats, extra, "median")
        low = T.figure(group, stats, extra, "min")
        notes = ", ".join(f"{k}={extra[k]}" for k in NOTE_KEYS if k in extra)
        lines.append(f"| {group} | {label} | {fmt_value(median, group)} | {fmt_value(low, group)} | {notes} |")
    return lines if found else []


def notes_lines(rows, groups_with_ratios):
    """Notes for rows inside ratio groups (records, per-op costs, memory details)."""
    lines = []
    for group, label, _, extra in rows:
        if group not in groups_with_ratios:
            continue
        notes = ", ".join(f"{k}={extra[k]}" for k in NOTE_KEYS if k in extra)
        if notes:
            lines.append(f"- {group}, {label}: {notes}")
    return lines


def header_lines(data):
    machine = data.get("machine_info", {})
    commit = data.get("commit_info", {})
    cpu = machine.get("cpu", {}) or {}
    versions = machine.get("bench_versions", {})
    threads = machine.get("bench_threads", {})
    lines = [f"- **Date:** {data.get('datetime', '?')} (pytest-benchmark {data.get('version', '?')})"]
    if commit.get("id") and commit.get("time"):    # run outside git: id "unversioned", no time
        dirty = " with uncommitted changes" if commit.get("dirty") else ""
        lines.append(f"- **Commit:** {commit['id'][:10]} on {commit.get('branch', '?')}{dirty}")
    cpus = machine.get("bench_cpu_count") or cpu.get("count", "?")
    lines.append(f"- **Machine:** {cpu.get('brand_raw') or machine.get('processor') or '?'}, "
                 f"{cpus} CPUs, {machine.get('system', '?')} {machine.get('release', '')}, "
                 f"{machine.get('python_implementation', 'Python')} {machine.get('python_version', '?')}")
    if versions:
        lines.append("- **Versions:** " + ", ".join(f"{k} {v}" for k, v in versions.items()
                                                    if v != "not installed"))
    if threads:
        lines.append("- **Threads:** " + ", ".join(f"{k}={v}" for k, v in threads.items()))
    return lines


def markdown(data):
    rows = rows_of(data)
    medians, means = T.table(rows, "median"), T.table(rows, "mean")
    groups = ratio_groups(medians)
    out = ["### Run", ""] + header_lines(data)
    out += ["", "### Ratios", "",
            ("Median per group (time, or MB for memory groups). Each peer's cell is its "
             "median and, in brackets, **peer / tapejit**: above 1 tapejit is faster (or "
             "smaller), below 1 the peer is."), ""]
    out += ratio_table(groups)
    present = set(peer_columns(groups))
    out += [""] + [f"- {text}" for peer, text in PEER_NOTES.items() if peer in present]
    notes = notes_lines(rows, groups)
    if notes:
        out += ["", "Notes on rows:", ""] + notes
    out += ["", "### Targets (SPEC §5 and replay)", ""] + target_table(medians, means)
    other = other_table(rows, groups)
    if other:
        out += ["", "### Other groups", ""] + other
    return "\n".join(out) + "\n"


def chart(data, path):
    """Horizontal bars of peer/tapejit (median) per group, log scale; needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = ratio_groups(T.table(rows_of(data), "median"))
    peers = [p for p in peer_columns(groups) if p != "tapejit"]
    labels = list(groups)
    height = 0.8 / max(1, len(peers))
    fig, ax = plt.subplots(figsize=(11, 0.3 * len(labels) * max(1, len(peers)) ** 0.5 + 1.8))
    for i, peer in enumerate(peers):
        ys, ratios = [], []
        for j, group in enumerate(labels):
            value = groups[group].get(peer)
            if value is not None and groups[group]["tapejit"]:
                ys.append(j + (i - (len(peers) - 1) / 2) * height)
                ratios.append(value / groups[group]["tapejit"])
        # each bar runs from 1 (tapejit) to the ratio: right means tapejit is ahead
        ax.barh(ys, [abs(r - 1.0) for r in ratios], left=[min(r, 1.0) for r in ratios],
                height=height, label=peer)
        for y, r in zip(ys, ratios):
            ax.text(r, y, f" {fmt_ratio(r)} " if r >= 1 else f"{fmt_ratio(r)} ", va="center",
                    ha="left" if r >= 1 else "right", fontsize=6)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("peer / tapejit (median): right of 1, tapejit is faster or smaller")
    ax.set_title(f"tapejit vs peers, {data.get('datetime', '')[:10]}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="pytest-benchmark's --benchmark-json file")
    parser.add_argument("--out", help="write the Markdown here (default: stdout)")
    parser.add_argument("--png", help="bar chart path (default: the JSON's name with .png)")
    parser.add_argument("--no-png", action="store_true", help="skip the chart")
    args = parser.parse_args(argv)
    data = load(args.json)
    text = markdown(data)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if not args.no_png:
        png = args.png or os.path.splitext(args.json)[0] + ".png"
        try:
            chart(data, png)
        except ImportError:
            print("report.py: matplotlib is not installed, no chart "
                  "(pip install -e \".[bench]\")", file=sys.stderr)
            return 0
        print(f"report.py: chart written to {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
