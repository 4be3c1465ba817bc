"""bench/plots.py: the records the benches write become PNGs that decode and show something, the
same records give the same bytes, and a missing record is named with the command that writes it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from bench import plots
from docsgen import plots as site_plots

ROOT = Path(__file__).resolve().parents[2]
PLOTS = {"overhead.png", "throughput.png", "judge.png", "cold_start.png"}


def blankness(png: bytes) -> float:
    """How far from one flat colour an image is: its pixels' standard deviation (0 = blank)."""
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    return float(pixels[..., :3].std())


def test_every_plot_is_a_png_that_decodes_and_is_not_blank(records: Path) -> None:
    drawn = plots.draw(records)
    assert set(drawn) == PLOTS
    for name, png in drawn.items():
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        height, width = pixels.shape[:2]
        assert width >= 600 and height >= 300, f"{name} is {width}×{height}"
        assert blankness(png) > 0.05, f"{name} is blank"


def test_the_blank_check_can_fail() -> None:
    """What the test above relies on: a flat image measures as blank."""
    buf = io.BytesIO()
    matplotlib.image.imsave(buf, np.ones((40, 60, 3)), format="png")
    assert blankness(buf.getvalue()) < 0.01


def test_the_same_records_give_the_same_bytes(records: Path) -> None:
    first, second = plots.draw(records), plots.draw(records)
    assert first == second
    # No text chunk naming the software (its version would change the bytes with an upgrade).
    assert all(b"matplotlib" not in png for png in first.values())


def test_a_missing_record_is_named_with_the_command_that_writes_it(records: Path) -> None:
    (records / "guard.json").unlink()
    with pytest.raises(plots.RecordError) as err:
        plots.draw(records)
    assert "guard.json: no such file" in str(err.value)
    assert "bash bench/guard.sh" in str(err.value)
    # The plots of the records that are there can still be drawn.
    assert set(plots.draw(records, ["overhead", "throughput", "cold_start"])) == PLOTS - {"judge.png"}


def test_a_record_of_another_bench_or_schema_is_refused(records: Path) -> None:
    guard = json.loads((records / "guard.json").read_text())
    (records / "ondemand.json").write_text(json.dumps(guard))
    with pytest.raises(plots.RecordError, match="not a record of `bash bench/ondemand.sh`"):
        plots.draw(records, ["cold_start"])
    guard["schema"] = 99
    (records / "guard.json").write_text(json.dumps(guard))
    with pytest.raises(plots.RecordError, match="schema 99"):
        plots.draw(records, ["judge"])
    (records / "guard.json").write_text("{not json")
    with pytest.raises(plots.RecordError, match="not JSON"):
        plots.draw(records, ["judge"])


def test_a_run_without_the_optional_rows_still_draws(records: Path) -> None:
    """Redis rows, the floors and the autoscaling row are there only when the run had them."""
    rec = json.loads((records / "request_path.json").read_text())
    rec["rows"] = [r for r in rec["rows"] if r["target"] in ("direct", "llmgw", "passthrough")]
    (records / "request_path.json").write_text(json.dumps(rec))
    guard = json.loads((records / "guard.json").read_text())
    guard["autoscale"] = None
    (records / "guard.json").write_text(json.dumps(guard))
    for name, png in plots.draw(records).items():
        assert blankness(png) > 0.05, f"{name} is blank"


def test_the_anchor_is_drawn_past_a_break_when_off_the_others_scale(records_with_anchor: Path) -> None:
    """A run with BENCH_LITELLM=1: LiteLLM's proxy is in the overhead plot, on an axis of its own
    past a break when it adds far more than the others (so theirs stay readable), in the throughput
    plot beside llmgw with 1 worker, and in the request-path table."""
    for name, png in plots.draw(records_with_anchor).items():
        assert blankness(png) > 0.05, f"{name} is blank"
    rec = plots.load(records_with_anchor, "request_path")
    fig = plots.overhead(rec)
    assert len(fig.axes) == 2
    near, far = fig.axes
    assert "LiteLLM proxy, 1 worker\n(the anchor)" in [t.get_text() for t in near.get_yticklabels()]
    assert "aiohttp pass-through\n(the pass-through floor)" in [t.get_text() for t in near.get_yticklabels()]
    assert {t.get_text() for t in far.texts} == {"+4.14 json", "+4.33 stream"}
    assert "+0.200 json" in {t.get_text() for t in near.texts}
    # The far axis goes on from where the near one stops.
    assert near.get_xlim()[1] == far.get_xlim()[0] < 1 < 4.1 < 4.4 < far.get_xlim()[1]

    # An anchor on the others' scale shares their axis.
    for r in rec["rows"]:
        if r["target"] == "litellm":
            r["added_p50_ms"] = 0.45
            r["rounds"]["added_p50_ms"] = [0.44, 0.46]
    assert len(plots.overhead(rec).axes) == 1

    title = plots.throughput(rec)._suptitle
    assert title is not None
    assert ("llmgw, 1 worker: 20.0× (whole answers) and 20.0× (streams) the requests/s of LiteLLM"
            in title.get_text())
    legend = plots.throughput(rec).legends[0]
    assert "LiteLLM proxy (the anchor)" in [t.get_text() for t in legend.get_texts()]
    assert "| LiteLLM proxy (the anchor), 1 worker | 4.200 (+4.137) |" in plots.table(records_with_anchor,
                                                                                      "request-path")
    assert any("the anchor, LiteLLM's proxy" in line
               for line in plots.table(records_with_anchor, "verdicts").splitlines())


def test_the_command_line_writes_the_pngs_and_says_what_is_missing(records: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "plots.py"), str(records), str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == PLOTS
    assert (out / "overhead.png").read_bytes() == plots.draw(records, ["overhead"])["overhead.png"]

    (records / "ondemand.json").unlink()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "plots.py"), str(records), str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "ondemand.json: no such file; `bash bench/ondemand.sh` writes it" in done.stderr


def test_the_tables_carry_the_records_figures_and_metadata(records: Path) -> None:
    runs = plots.table(records, "runs")
    for name in ("request_path.json", "guard.json", "ondemand.json", "judge_eval.json"):
        assert name in runs
    meta = json.loads((records / "guard.json").read_text())["meta"]
    assert meta["commit"] in runs and f"{meta['machine']['cores']} cores" in runs

    path = plots.table(records, "request-path")
    assert "| llmgw, 1 worker |" in path and "limits in Redis" in path
    assert "(+0.200)" in path  # llmgw's added p50 at c1, json, median of the two rounds
    assert "| aiohttp pass-through, 2 processes |" in path
    assert "messages → chat" in plots.table(records, "dialects")
    assert plots.table(records, "verdicts").startswith("- PASS: llmgw adds")
    judge = plots.table(records, "judge")
    assert "| 8 | distinct | 2 | 3.50 |" in judge
    assert "second replica 41 s" in judge
    assert "| (b) input | 10 |" in plots.table(records, "guard-chat")
    assert "within its bound of 0.50 s" in plots.table(records, "cold-start")
    # Precision 150/190, recall 150/200, over-block 40/250; SimpleSafetyTests has no safe case.
    judged = plots.table(records, "judge-eval")
    assert "| `xstest` | 450 | 0 | 0.789 | 0.750 | 0.769 | 0.160 | 900.0 | 1400.0 | 61.5 |" in judged
    assert "| `sst` | 100 | 2 | 1.000 | 0.918 | 0.957 | – |" in judged
    with pytest.raises(plots.RecordError, match="no table named 'nope'"):
        plots.table(records, "nope")


def test_the_site_expands_a_table_marker(records: Path) -> None:
    page = "# Benchmarks\n\n<!-- llmgw:plot-table cold-start -->\n\nafter\n"
    expanded = site_plots.expand(page, records)
    assert "<!-- llmgw" not in expanded
    assert "| through llmgw (`min 0`" in expanded and expanded.endswith("\n\nafter\n")


def test_the_site_draws_the_recorded_figures() -> None:
    """bench/figures/ holds a record of each bench, and the site's plots are drawn from them."""
    drawn = site_plots.generated()
    assert set(drawn) == {f"benchmarks/{name}" for name in PLOTS}
    for name, png in drawn.items():
        assert blankness(png) > 0.05, f"{name} is blank"
