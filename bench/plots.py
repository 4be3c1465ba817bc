"""The benchmarks' plots, drawn from the benches' JSON records.

    .venv/bin/python bench/plots.py [RESULTS_DIR] [OUT_DIR] [--only NAME ...]

RESULTS_DIR holds the records the benches write (default bench/results): request_path.json
(`bash bench/run.sh`), guard.json (`bash bench/guard.sh`) and ondemand.json
(`bash bench/ondemand.sh`). The PNGs go to OUT_DIR (default RESULTS_DIR/plots):

- overhead.png: what llmgw adds to p50 at concurrency 1 beside the floors (the aiohttp
  pass-through, the raw httptools floor, nginx as a proxy) and the anchor (LiteLLM's proxy, when
  the run had it, on an axis of its own past a break when it is off the others' scale), whole
  answers and streams;
- throughput.png: requests/s at the highest concurrency by workers, llmgw against the
  pass-through in as many processes (and llmgw with its limits in Redis and LiteLLM's proxy, when
  the run had them);
- judge.png: the demo judge's verdicts/s and p99 by concurrency;
- cold_start.png: a cold start through llmgw against llama-server started by hand, and a swap.

The docs site draws the same plots from bench/figures/ (docsgen/plots.py): `draw()` returns them
as {file name: PNG bytes}, and `table()` the tables of the same figures in Markdown. The same
records give the same bytes: no timestamp or version goes into a PNG.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

import matplotlib
import matplotlib.style
from matplotlib.figure import Figure
from matplotlib.ticker import StrMethodFormatter

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = 1  # bench/record.py's
# Which bench writes each record, for the error that says a record is missing.
RECORDS = {
    "request_path": ("request_path.json", "bash bench/run.sh"),
    "guard": ("guard.json", "bash bench/guard.sh"),
    "ondemand": ("ondemand.json", "bash bench/ondemand.sh"),
    "judge_eval": ("judge_eval.json", "bash bench/judge_eval.sh"),
}
LLMGW, REDIS, ACCENT, FLOOR, NGINX, MUTED = "#1f6fb2", "#7aa9d6", "#e07b39", "#9c9c9c", "#5a9e5a", "#555555"
PASSTHROUGH, ANCHOR = ACCENT, "#7b4fa0"  # the aiohttp pass-through; LiteLLM's proxy, the anchor
# On top of matplotlib's defaults, whatever matplotlibrc the machine has: the same record must give
# the same bytes everywhere.
STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "svg.hashsalt": "llmgw",
}


class RecordError(Exception):
    """A record is missing or is not one this script can read."""


Record = dict[str, Any]


def load(results: Path, bench: str) -> Record:
    """The record of `bench` in `results`, checked to be that bench's and of this schema."""
    name, command = RECORDS[bench]
    path = results / name
    if not path.is_file():
        raise RecordError(f"{path}: no such file; `{command}` writes it to bench/results/{name}")
    try:
        rec = json.loads(path.read_text())
    except ValueError as exc:
        raise RecordError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(rec, dict) or rec.get("bench") != bench:
        raise RecordError(f"{path}: not a record of `{command}` (bench {rec.get('bench')!r})"
                          if isinstance(rec, dict) else f"{path}: not a record")
    if rec.get("schema") != SCHEMA:
        raise RecordError(f"{path}: schema {rec.get('schema')!r}, this script reads {SCHEMA}; "
                          f"run `{command}` again")
    return rec


# --- captions ---------------------------------------------------------------------------------


def machine(meta: dict[str, Any]) -> str:
    m = meta["machine"]
    vm = ", a VM" if m.get("virtual") else ""
    return f"{m['cores']} cores ({m['cpu']}{vm})"


def load_avg(meta: dict[str, Any]) -> str:
    m = meta["machine"]
    before = "?" if m.get("load_before") is None else f"{m['load_before']:.2f}"
    return f"{before} before, {m['load_after']:.2f} after"


def commit(meta: dict[str, Any]) -> str:
    return f"{meta['commit']}" + (" (src/ modified)" if meta.get("src_modified") else "")


def caption(meta: dict[str, Any]) -> str:
    """One line under a plot: when, what code, what machine and how busy."""
    return (f"{meta['date'][:10]}, commit {commit(meta)}; {machine(meta)}; "
            f"load average {load_avg(meta)}")


# --- the request path: bench/run.sh ------------------------------------------------------------


def rows_of(rec: Record) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    return {(r["api"], r["target"], r["mode"], r["conc"]): r for r in rec["rows"]}


def concs(rec: Record) -> tuple[int, int]:
    """The lowest and highest concurrency of the run: the latency and throughput figures'."""
    found = sorted({r["conc"] for r in rec["rows"]})
    if not found:
        raise RecordError("the request-path record has no rows")
    return found[0], found[-1]


def spread(values: Iterable[float | None], mid: float) -> tuple[float, float]:
    """Error bar lengths below and above `mid`: the rounds' min and max."""
    vs = [v for v in values if v is not None]
    if len(vs) < 2:
        return 0.0, 0.0
    return max(0.0, mid - min(vs)), max(0.0, max(vs) - mid)


OVERHEAD_TARGETS = (
    ("llmgw", "llmgw, 1 worker", LLMGW),
    ("llmgw-redis", "llmgw, 1 worker,\nlimits in Redis", REDIS),
    ("litellm", "LiteLLM proxy, 1 worker\n(the anchor)", ANCHOR),
    ("passthrough", "aiohttp pass-through\n(the pass-through floor)", PASSTHROUGH),
    ("passthrough-raw", "raw floor\n(httptools, no framework)", FLOOR),
    ("proxy-nginx", "nginx as a proxy\n(the hop alone, in C)", NGINX),
)
# Targets whose bars may go on an axis of their own, past a break, when they are off the scale
# of the others: a proxy adding milliseconds beside ones adding tenths of one.
OFF_SCALE_TARGETS = ("litellm",)
MODES = ("json", "stream")


class Bar(NamedTuple):
    y: float
    mode: str
    target: str
    colour: str
    added: float
    err: tuple[float, float]


def overhead(rec: Record) -> Figure:
    rows, (low, _) = rows_of(rec), concs(rec)
    targets = [t for t in OVERHEAD_TARGETS if any(("chat", t[0], m, low) in rows for m in MODES)]
    height = 0.38
    bars = []
    for j, mode in enumerate(MODES):
        for i, (target, _, colour) in enumerate(targets):
            r = rows.get(("chat", target, mode, low))
            if r is None or r["added_p50_ms"] is None:
                continue
            added = r["added_p50_ms"]
            bars.append(Bar(i + (j - 0.5) * height, mode, target, colour, added,
                            spread(r["rounds"]["added_p50_ms"], added)))
    goal = rec["goals"]["added_p50_ms"]
    near = [b for b in bars if b.target not in OFF_SCALE_TARGETS]
    right = max([goal, *(b.added + b.err[1] for b in near)]) * 1.3
    # The anchor's bars go past a break when they would squeeze the others' into a few pixels.
    far = [b for b in bars if b.target in OFF_SCALE_TARGETS and b.added + b.err[1] > right * 1.5]
    if not far:
        near = bars
        right = max([goal, *(b.added + b.err[1] for b in bars)]) * 1.3
    lowest = min([0.0, *(b.added - b.err[0] for b in bars)])
    fig = Figure(figsize=(8.5, 4.2), layout="constrained")
    if far:
        ax, far_ax = fig.subplots(1, 2, sharey=True, width_ratios=[3, 1.25])
        fig.get_layout_engine().set(wspace=0.0)  # type: ignore[union-attr]
    else:
        ax, far_ax = fig.add_subplot(), None
    for b in bars:
        alpha = 1.0 if b.mode == "json" else 0.55
        if b in far:
            # On the near axis the bar runs off its edge; its figure is on the far axis.
            ax.barh(b.y, b.added, height * 0.92, color=b.colour, alpha=alpha)
            continue
        ax.barh(b.y, b.added, height * 0.92, color=b.colour, alpha=alpha, xerr=[[b.err[0]], [b.err[1]]],
                ecolor=MUTED, capsize=2, error_kw={"linewidth": 0.8})
        ax.annotate(f"{b.added:+.3f} {b.mode}", (b.added + b.err[1], b.y), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=7.5)
    ax.axvline(goal, color="#b22222", linestyle="--", linewidth=1)
    # The goal's label may run past the axis' edge, over the far axis' empty top: the layout keeps
    # no room for it there.
    ax.text(goal, -0.75, f" llmgw's goal: at most +{goal:g} ms", color="#b22222", fontsize=7.5,
            va="center").set_in_layout(far_ax is None)
    ax.set_yticks(range(len(targets)), [label for _, label, _ in targets])
    ax.set_ylim(len(targets) - 0.45, -1.0)
    # A floor can come out below the direct row on a noisy run: its bar then points left of 0.
    ax.set_xlim(min(0.0, lowest * 1.3), right)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(f"ms added to p50 at concurrency {low}, over the fake upstream asked directly")
    if far_ax is not None:
        # The far axis goes on from where the near one stops, on a scale of its own.
        hi = max(b.added + b.err[1] for b in far)
        for b in far:
            far_ax.barh(b.y, b.added, height * 0.92, color=b.colour, alpha=1.0 if b.mode == "json" else 0.55,
                        xerr=[[b.err[0]], [b.err[1]]], ecolor=MUTED, capsize=2, error_kw={"linewidth": 0.8})
            far_ax.annotate(f"{b.added:+.2f} {b.mode}", (b.added + b.err[1], b.y), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=7.5)
        far_ax.set_xlim(right, right + (hi - right) * 1.3)
        far_ax.spines["left"].set_visible(False)
        far_ax.patch.set_visible(False)  # the goal's label may run over its top
        far_ax.tick_params(axis="y", left=False)
        far_ax.grid(axis="y", visible=False)
        far_ax.set_xlabel("ms, past the break")
        # The break: a slash where each axis ends.
        mark: dict[str, Any] = {"marker": [(-1, -1.6), (1, 1.6)], "markersize": 9, "linestyle": "none",
                                "color": "black", "mec": "black", "mew": 0.8, "clip_on": False}
        ax.plot([1], [0], transform=ax.transAxes, **mark)
        far_ax.plot([0], [0], transform=far_ax.transAxes, **mark)
    rounds = rec["meta"].get("settings", {}).get("rounds")
    fig.suptitle("What a proxy adds to a chat completion at p50, one request at a time\n"
                 "dark: whole answer, light: stream"
                 + ("" if not rounds else f"; median of {rounds} rounds (whiskers: min, max)"),
                 x=0.01, ha="left", fontsize=10)
    fig.supxlabel(caption(rec["meta"]), fontsize=7, color=MUTED, x=0.01, ha="left")
    return fig


THROUGHPUT_TARGETS = (
    # (processes, target, label, colour)
    (1, "llmgw", "llmgw", LLMGW),
    (1, "llmgw-redis", "llmgw, limits in Redis", REDIS),
    (1, "passthrough", "aiohttp pass-through", PASSTHROUGH),
    (1, "litellm", "LiteLLM proxy (the anchor)", ANCHOR),
    (2, "llmgw-2w", "llmgw", LLMGW),
    (2, "llmgw-2w-redis", "llmgw, limits in Redis", REDIS),
    (2, "passthrough-2p", "aiohttp pass-through", PASSTHROUGH),
)


def throughput(rec: Record) -> Figure:
    rows, (_, high) = rows_of(rec), concs(rec)
    fig = Figure(figsize=(8.5, 4.0), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    present = [t for t in THROUGHPUT_TARGETS if any(("chat", t[1], m, high) in rows for m in MODES)]
    # Each group of bars (1 process, 2) as wide as the other, its bars side by side in the order above.
    most = max([1, *(sum(t[0] == procs for t in present) for procs in (1, 2))])
    width = (0.8 if most < 4 else 0.9) / most
    labelled: set[str] = set()
    for ax, mode in zip(axes, MODES, strict=True):
        for procs in (1, 2):
            anchor = rows.get(("chat", "passthrough" if procs == 1 else "passthrough-2p", mode, high))
            group = [t for t in present if t[0] == procs]
            for k, (_, target, label, colour) in enumerate(group):
                r = rows.get(("chat", target, mode, high))
                if r is None:
                    continue
                x = procs - 1 + (k - (len(group) - 1) / 2) * width
                err = spread(r["rounds"]["rps"], r["rps"])
                ax.bar(x, r["rps"], width * 0.92, color=colour, yerr=[[err[0]], [err[1]]],
                       ecolor=MUTED, capsize=2, error_kw={"linewidth": 0.8},
                       label=None if label in labelled else label)
                labelled.add(label)
                note = f"{r['rps']:,.0f}"
                if anchor is not None and anchor is not r and anchor["rps"] > 0:
                    note += f"\n{r['rps'] / anchor['rps']:.0%}"
                ax.text(x, r["rps"] + err[1], note, ha="center", va="bottom", fontsize=7 if most < 4 else 6.5)
        ax.set_xticks([0, 1], ["1 worker / process", "2 workers / processes"])
        ax.set_title(f"{'whole answers' if mode == 'json' else 'streams'} (chat completions)", loc="left")
        ax.grid(axis="x", visible=False)
        ax.margins(y=0.18)
    axes[0].set_ylabel(f"requests/s at concurrency {high}")
    axes[0].yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    fig.legend(loc="outside right center", fontsize=7.5)
    title = "Requests per second by workers (%: of the aiohttp pass-through in as many processes)"
    times = []
    for mode, what in zip(MODES, ("whole answers", "streams"), strict=True):
        gw, litellm = rows.get(("chat", "llmgw", mode, high)), rows.get(("chat", "litellm", mode, high))
        if gw is not None and litellm is not None and litellm["rps"] > 0:
            times.append(f"{gw['rps'] / litellm['rps']:.1f}× ({what})")
    if times:
        title += f"\nllmgw, 1 worker: {' and '.join(times)} the requests/s of LiteLLM's proxy, 1 worker"
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.supxlabel(caption(rec["meta"]), fontsize=7, color=MUTED, x=0.01, ha="left")
    return fig


# --- the judge: bench/guard.sh -----------------------------------------------------------------


def judge(rec: Record) -> Figure:
    fig = Figure(figsize=(7.5, 3.6), layout="constrained")
    rate_ax, p99_ax = fig.subplots(1, 2)
    rows = rec["judgments"]
    all_concs = sorted({r["conc"] for r in rows})
    for texts, colour, marker in (("same", FLOOR, "s"), ("distinct", LLMGW, "o")):
        mine = sorted((r for r in rows if r["texts"] == texts and r["replicas"] == 1),
                      key=lambda r: r["conc"])
        if not mine:
            continue
        label = "one text (cached)" if texts == "same" else "distinct texts"
        xs = [r["conc"] for r in mine]
        rate_ax.plot(xs, [r["verdicts_per_s"] for r in mine], marker=marker, color=colour, label=label)
        p99_ax.plot(xs, [r["p99_ms"] for r in mine], marker=marker, color=colour, label=label)
        # The share shed, for the distinct texts only: real traffic's, and one line of labels.
        for r in mine if texts == "distinct" else []:
            if r["judgments"]:
                rate_ax.annotate(f"{r['shed'] / r['judgments']:.0%} shed", (r["conc"], r["verdicts_per_s"]),
                                 textcoords="offset points", xytext=(0, 6), ha="center", fontsize=6.5,
                                 color=colour)
    scaled = (rec.get("autoscale") or {}).get("row")
    if scaled:
        rate_ax.plot([scaled["conc"]], [scaled["verdicts_per_s"]], marker="*", markersize=10,
                     linestyle="none", color=ACCENT, label="distinct, 2 judge replicas")
        p99_ax.plot([scaled["conc"]], [scaled["p99_ms"]], marker="*", markersize=10, linestyle="none",
                    color=ACCENT, label="distinct, 2 judge replicas")
    budget = rec["budget_ms"]
    p99_ax.axhline(budget, color="#b22222", linestyle="--", linewidth=1)
    p99_ax.text(all_concs[0] if all_concs else 1, budget, f"budget {budget:,} ms", color="#b22222",
                fontsize=7.5, va="bottom")
    for ax in (rate_ax, p99_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_concs, [str(c) for c in all_concs])
        ax.minorticks_off()
        ax.set_xlabel("concurrent judgments")
        ax.set_ylim(bottom=0)
    rates = [r["verdicts_per_s"] for r in rows] + ([scaled["verdicts_per_s"]] if scaled else [])
    rate_ax.set_ylim(0, max([*rates, 0.1]) * 1.25)
    p99_ax.set_ylim(top=budget * 1.15)
    p99_ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    rate_ax.set_xlim(all_concs[0] / 1.6 if all_concs else 0.5, all_concs[-1] * 1.6 if all_concs else 64)
    rate_ax.set_ylabel("verdicts per second")
    p99_ax.set_ylabel("verdicts' p99 latency (ms)")
    rate_ax.set_title("Verdicts per second", loc="left")
    p99_ax.set_title("p99 of the verdicts (client's view)", loc="left")
    rate_ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"The demo judge ({rec['judge']}, one thread, 2 slots) under load; what cannot finish "
                 "in budget is shed", x=0.01, ha="left", fontsize=10)
    fig.supxlabel(caption(rec["meta"]), fontsize=7, color=MUTED, x=0.01, ha="left")
    return fig


# --- on-demand models: bench/ondemand.sh ---------------------------------------------------------


def cold_start(rec: Record) -> Figure:
    cold = rec["cold_start"]
    series = (
        ("llama-server by hand\n(start, /health, request)", cold["by_hand_s"], FLOOR),
        ("through llmgw\n(min 0: no replica yet)", cold["through_llmgw_s"], LLMGW),
        ("swap through llmgw\n(stop A, start B)", rec["swap_s"], ACCENT),
    )
    fig = Figure(figsize=(8.5, 3.2), layout="constrained")
    ax = fig.add_subplot()
    hand = median(cold["by_hand_s"])
    bound = hand + cold["allowed_s"]
    right = max(bound, *(max(samples) for _, samples, _ in series)) * 1.3
    for i, (_, samples, colour) in enumerate(series):
        mid = median(samples)
        ax.barh(i, mid, 0.6, color=colour, alpha=0.85)
        # Each sample as a dot, spread over the bar's height in a fixed order (no random jitter:
        # the same record must give the same PNG).
        n = len(samples)
        ax.scatter(samples, [i - 0.2 + 0.4 * k / max(1, n - 1) for k in range(n)], s=10,
                   color="black", zorder=3, linewidths=0)
        ax.text(max(samples) + right * 0.02, i, f"median {mid:.2f} s", va="center", fontsize=7.5)
    ax.axvline(bound, color="#b22222", linestyle="--", linewidth=1)
    ax.text(bound, -0.6, f"llmgw's bound: by hand + max({rec['bound']['fraction']:.0%}, "
            f"{rec['bound']['seconds']:g} s) ", color="#b22222", fontsize=7.5, va="center", ha="right")
    ax.set_yticks(range(len(series)), [label for label, _, _ in series])
    ax.set_ylim(len(series) - 0.5, -0.75)
    ax.set_xlim(0, right)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("seconds from the request (by hand: from starting the process) to the first "
                  "streamed token")
    fig.suptitle(f"Cold start of the demo model (Gemma 3 270M Q4_K_M): bars are medians of "
                 f"{len(cold['through_llmgw_s'])} runs, dots the runs", x=0.01, ha="left", fontsize=10)
    fig.supxlabel(caption(rec["meta"]), fontsize=7, color=MUTED, x=0.01, ha="left")
    return fig


# name -> (record, drawing)
PLOTS: dict[str, tuple[str, Callable[[Record], Figure]]] = {
    "overhead": ("request_path", overhead),
    "throughput": ("request_path", throughput),
    "judge": ("guard", judge),
    "cold_start": ("ondemand", cold_start),
}


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    # No "Software" text chunk (it names matplotlib's version): the bytes depend on the record only.
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def draw(results: Path, names: Iterable[str] | None = None) -> dict[str, bytes]:
    """The plots (all, or those named) of the records in `results`: {"overhead.png": PNG, ...}.
    A record a plot needs that is missing or unreadable raises RecordError."""
    wanted = list(PLOTS) if names is None else list(names)
    unknown = [n for n in wanted if n not in PLOTS]
    if unknown:
        raise RecordError(f"no plot named {', '.join(unknown)}; there are {', '.join(PLOTS)}")
    records: dict[str, Record] = {}
    out = {}
    with matplotlib.rc_context():
        matplotlib.style.use(["default", STYLE])
        for name in wanted:
            bench, drawing = PLOTS[name]
            if bench not in records:
                records[bench] = load(results, bench)
            out[f"{name}.png"] = png(drawing(records[bench]))
    return out


# --- tables of the same figures, for the docs ---------------------------------------------------


def _ms(v: float | None, signed: bool = False, digits: int = 3) -> str:
    if v is None:
        return "–"
    return f"{v:+,.{digits}f}" if signed else f"{v:,.{digits}f}"


def _table(head: list[str], align: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def runs_table(results: Path) -> str:
    """When, on what code and machine each recorded run was taken, and with what command."""
    body = []
    for bench, (name, _) in RECORDS.items():
        meta = load(results, bench)["meta"]
        body.append([f"`{name}`", meta["date"].replace("T", " ").replace("Z", " UTC"), f"`{commit(meta)}`",
                     machine(meta), load_avg(meta), f"`{meta.get('command') or '–'}`"])
    return _table(["record", "date", "commit", "machine", "load average", "command"],
                  ["---"] * 6, body)


REQUEST_PATH_ROWS = (
    ("direct", "direct to the fake upstream"),
    ("llmgw", "llmgw, 1 worker"),
    ("llmgw-redis", "llmgw, 1 worker, limits in Redis"),
    ("passthrough", "aiohttp pass-through, 1 process"),
    ("litellm", "LiteLLM proxy (the anchor), 1 worker"),
    ("passthrough-raw", "raw floor (httptools), 1 process"),
    ("proxy-nginx", "nginx as a proxy, 1 worker"),
    ("llmgw-2w", "llmgw, 2 workers"),
    ("llmgw-2w-redis", "llmgw, 2 workers, limits in Redis"),
    ("passthrough-2p", "aiohttp pass-through, 2 processes"),
)


def request_path_table(results: Path) -> str:
    """Chat completions, each target: added p50 at the lowest concurrency, requests/s and CPU per
    request at the highest, whole answers and streams."""
    rec = load(results, "request_path")
    rows, (low, high) = rows_of(rec), concs(rec)
    body = []
    for target, label in REQUEST_PATH_ROWS:
        cells = [rows.get(("chat", target, m, c)) for c in (low, high) for m in MODES]
        if not any(cells):
            continue
        lo_json, lo_stream, hi_json, hi_stream = cells
        row = [label]
        for r in (lo_json, lo_stream):
            row.append("–" if r is None else (f"{r['p50_ms']:.3f}" if target == "direct"
                                              else f"{r['p50_ms']:.3f} ({_ms(r['added_p50_ms'], True)})"))
        for r in (hi_json, hi_stream):
            row.append("–" if r is None else f"{r['rps']:,.0f}")
        for r in (hi_json, hi_stream):
            row.append("–" if r is None or r["cpu_us"] is None else str(r["cpu_us"]))
        body.append(row)
    return _table(["chat completions", f"p50 ms c{low} json (added)", f"p50 ms c{low} stream (added)",
                   f"rps c{high} json", f"rps c{high} stream", f"CPU µs/req c{high} json",
                   f"CPU µs/req c{high} stream"], ["---", *["---:"] * 6], body)


def dialects_table(results: Path) -> str:
    """Each dialect through llmgw (1 worker) beside chat completions: added p50 at the lowest
    concurrency, requests/s at the highest and its share of chat's."""
    rec = load(results, "request_path")
    rows, (low, high) = rows_of(rec), concs(rec)
    apis = rec["labels"]["apis"]
    body = []
    for api, label in apis.items():
        for mode in MODES:
            lo, hi = rows.get((api, "llmgw", mode, low)), rows.get((api, "llmgw", mode, high))
            chat_hi = rows.get(("chat", "llmgw", mode, high))
            if lo is None and hi is None:
                continue
            share = ("–" if hi is None or chat_hi is None or not chat_hi["rps"]
                     else f"{hi['rps'] / chat_hi['rps']:.0%}")
            body.append([label, mode, "–" if lo is None else _ms(lo["added_p50_ms"], True),
                         "–" if hi is None else f"{hi['rps']:,.0f}", share,
                         "–" if hi is None or hi["cpu_us"] is None else str(hi["cpu_us"])])
    return _table(["API (through llmgw, 1 worker)", "mode", f"added p50 ms c{low}", f"rps c{high}",
                   "of chat's rps", f"CPU µs/req c{high}"], ["---", "---", "---:", "---:", "---:", "---:"],
                  body)


def verdicts_list(results: Path) -> str:
    """The goals' verdicts as the run printed them."""
    rec = load(results, "request_path")
    return "\n".join(line if line.startswith(("-", " ")) else f"- {line}" for line in rec["verdicts"])


def guard_chat_table(results: Path) -> str:
    rec = load(results, "guard")
    body = [[r["label"], str(r["requests"]), _ms(r["p50_ms"], digits=0), _ms(r["p99_ms"], digits=0),
             _ms(r["added_p50_ms"], True, 0), _ms(r["added_p99_ms"], True, 0), str(r["blocked"]),
             str(r["failed_closed"])] for r in rec["chat"]]
    out = _table(["guard", "requests", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "blocked",
                  "failed closed"], ["---", *["---:"] * 7], body)
    if not rec["chat_complete"]:
        asked = rec["meta"].get("settings", {}).get("requests")
        out += ("\n\nThe chat phase reached its time cap (`GUARD_BENCH_MAX_SECONDS`) first: a mode with "
                f"fewer than {asked or 'the'} requests asked for was cut short.")
    return out


def judge_table(results: Path) -> str:
    rec = load(results, "guard")
    rows = list(rec["judgments"])
    scaled = (rec.get("autoscale") or {}).get("row")
    if scaled:
        rows.append(scaled)
    body = []
    for r in rows:
        body.append([str(r["conc"]), "one text" if r["texts"] == "same" else "distinct", str(r["replicas"]),
                     f"{r['verdicts_per_s']:.2f}", _ms(r["p50_ms"], digits=0), _ms(r["p99_ms"], digits=0),
                     f"{r['within_budget']:,}/{r['judgments']:,}",
                     f"{r['shed']:,} ({r['shed'] / r['judgments']:.0%})" if r["judgments"] else "0",
                     str(r["timed_out"]),
                     "–" if r["cache_saved"] is None else f"{r['cache_saved']:.0%}"])
    out = _table(["concurrency", "texts", "judge replicas", "verdicts/s", "p50 ms", "p99 ms",
                  "within budget", "shed", "timed out", "cache saved"],
                 ["---:", "---", "---:", *["---:"] * 7], body)
    after = (rec.get("autoscale") or {}).get("second_replica_after_s")
    if after is not None:
        out += (f"\n\nThe judge keeper added the second replica {after:.0f} s into the load at "
                "concurrency 8 (the chat model stopped to make room for it).")
    return out


def cold_start_table(results: Path) -> str:
    rec = load(results, "ondemand")
    cold = rec["cold_start"]
    body = []
    for label, samples in (
            ("llama-server by hand (process start → /health → first token)", cold["by_hand_s"]),
            ("through llmgw (`min 0`, no replica when the request arrives)", cold["through_llmgw_s"]),
            ("swap through llmgw (stop A, start B, answer)", rec["swap_s"])):
        body.append([label, f"{median(samples):.2f}", f"{min(samples):.2f}", f"{max(samples):.2f}",
                     str(len(samples))])
    out = _table(["path", "median s", "min s", "max s", "runs"], ["---", "---:", "---:", "---:", "---:"],
                 body)
    verdict = "within" if cold["within_bound"] else "over"
    return out + (f"\n\nllmgw adds {cold['added_s']:.2f} s to the median cold start, {verdict} its bound "
                  f"of {cold['allowed_s']:.2f} s (max({rec['bound']['fraction']:.0%} of by hand, "
                  f"{rec['bound']['seconds']:g} s)).")


def judge_eval_table(results: Path) -> str:
    """The demo judge's figures on each shipped set (`ctl guard eval`)."""
    from bench import judge_eval

    return judge_eval.table(load(results, "judge_eval"))


TABLES: dict[str, Callable[[Path], str]] = {
    "runs": runs_table,
    "request-path": request_path_table,
    "dialects": dialects_table,
    "verdicts": verdicts_list,
    "guard-chat": guard_chat_table,
    "judge": judge_table,
    "cold-start": cold_start_table,
    "judge-eval": judge_eval_table,
}


def table(results: Path, name: str) -> str:
    """The Markdown table `name` of the records in `results`."""
    if name not in TABLES:
        raise RecordError(f"no table named {name!r}; there are {', '.join(TABLES)}")
    return TABLES[name](results)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "bench" / "results",
                        help="the directory of the records (default bench/results)")
    parser.add_argument("out", nargs="?", type=Path, help="where the PNGs go (default RESULTS/plots)")
    parser.add_argument("--only", action="append", choices=list(PLOTS), help="draw only this plot")
    args = parser.parse_args()
    try:
        plots = draw(args.results, args.only)
    except RecordError as exc:
        print(f"bench/plots.py: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    out: Path = args.out or args.results / "plots"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in plots.items():
        (out / name).write_bytes(data)
        print(out / name)


if __name__ == "__main__":
    main()
