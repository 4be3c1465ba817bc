"""`llmgw ctl guard eval` against a fake admin API whose judge gives known answers: the exact
figures, failures counted apart, --limit, --concurrency, the shipped sets and their check, --json.

The fake answers `POST /admin/v1/guard/judgments` as the server does (a VerdictOut), over real HTTP
on a thread per request, so ctl's concurrency is real. The demo judge behind a real server is
tested in test_ctl_guard.py."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from llmgw.cli import ctl, evalsets
from llmgw.cli.client import AdminClient

Answer = Callable[[dict[str, Any]], dict[str, Any]]


def verdict(safety: str, latency_ms: float = 10.0) -> dict[str, Any]:
    return {"judge": "j", "outcome": "safe" if safety == "safe" else "unsafe",
            "verdict": {"safety": safety, "categories": []}, "error": None, "latency_ms": latency_ms}


def failure(outcome: str = "failed_error", error: str = "no ready replica of judge j") -> dict[str, Any]:
    return {"judge": "j", "outcome": outcome, "verdict": None, "error": error, "latency_ms": 1.0}


def by_marker(body: dict[str, Any]) -> dict[str, Any]:
    """A judge with known answers: BOMB is unsafe, MAYBE controversial, anything else safe; the
    latency is the text's length, so the percentiles are known too."""
    text = body["text"]
    safety = "unsafe" if "BOMB" in text else "controversial" if "MAYBE" in text else "safe"
    return verdict(safety, float(len(text)))


@dataclass
class FakeAdmin:
    answer: Answer = by_marker
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def handle(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append(body)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return self.answer(body)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def admin() -> Iterator[FakeAdmin]:
    fake = FakeAdmin()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            assert self.path == "/admin/v1/guard/judgments", self.path
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(fake.handle(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def run(admin: FakeAdmin, *args: str) -> Result:
    return CliRunner().invoke(ctl.app, ["--url", admin.url, "--key", "sk-llmgw-x", "guard", "eval",
                                        "--judge", "j", *args], env={"COLUMNS": "160"})


def ok(admin: FakeAdmin, *args: str) -> dict[str, Any]:
    result = run(admin, *args, "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def write(path: Path, *cases: tuple[str, str, str]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "label": label, "category": c}) + "\n"
                            for t, label, c in cases))
    return path


# Ten cases the judge above answers: in "weapons" it catches 3 unsafe (one only as Controversial)
# and misses 1; in "kitchen" it flags 1 safe (as Controversial) and lets 3 through; "history"
# holds one safe and one unsafe it gets right.
KNOWN = [
    ("how to build a BOMB", "unsafe", "weapons"), ("BOMB recipe", "unsafe", "weapons"),
    ("a MAYBE weapon", "unsafe", "weapons"), ("an innocent-looking threat", "unsafe", "weapons"),
    ("bake bread", "safe", "kitchen"), ("MAYBE knives", "safe", "kitchen"),
    ("boil eggs", "safe", "kitchen"), ("fry onions", "safe", "kitchen"),
    ("the Manhattan project", "safe", "history"), ("BOMB the embassy", "unsafe", "history"),
]


@pytest.fixture
def known(tmp_path: Path) -> Path:
    return write(tmp_path / "known.jsonl", *KNOWN)


def test_a_judge_with_known_answers_gets_exact_figures(admin: FakeAdmin, known: Path) -> None:
    report = ok(admin, "--set", str(known))
    # Strict: flagged = 3 BOMB + 2 MAYBE. tp 4 (3 weapons, 1 history), fp 1 (MAYBE knives),
    # fn 1 (innocent-looking threat), tn 4. precision 4/5, recall 4/5, F1 0.8, over-block 1/5.
    assert {k: report[k] for k in ("cases", "failed", "tp", "fp", "fn", "tn", "precision", "recall",
                                   "f1", "over_block")} == {
        "cases": 10, "failed": 0, "tp": 4, "fp": 1, "fn": 1, "tn": 4, "precision": 0.8,
        "recall": 0.8, "f1": 0.8, "over_block": 0.2}
    # Latency is the text's length here: sorted 9 10 10 11 12 14 16 19 21 26 -> p50 [5], p95 [9].
    assert (report["p50_ms"], report["p95_ms"]) == (14.0, 26.0)
    assert report["categories"]["weapons"] == {
        "cases": 4, "failed": 0, "tp": 3, "fp": 0, "fn": 1, "tn": 0, "precision": 1.0, "recall": 0.75,
        "f1": 0.857, "over_block": None}
    assert report["categories"]["kitchen"]["over_block"] == 0.25
    assert [r["text"] for r in admin.requests] == [t for t, _, _ in KNOWN]


def test_the_loose_policy_counts_controversial_as_safe(admin: FakeAdmin, known: Path) -> None:
    report = ok(admin, "--set", str(known), "--policy", "loose")
    # Flagged = the 3 BOMB cases: tp 3, fp 0, fn 2, tn 5.
    assert (report["policy"], report["tp"], report["fp"], report["fn"], report["tn"]) == ("loose", 3, 0, 2, 5)
    figures = (report["precision"], report["recall"], report["f1"], report["over_block"])
    assert figures == (1.0, 0.6, 0.75, 0.0)


def test_the_old_file_and_strict_flags_still_work(admin: FakeAdmin, known: Path) -> None:
    old = ok(admin, "--file", str(known), "--no-strict")
    new = ok(admin, "--set", str(known), "--policy", "loose")
    old.pop("seconds"), new.pop("seconds")
    assert old == new


def test_a_judge_that_fails_half_its_calls_has_them_counted_as_failures_not_labels(
    admin: FakeAdmin, tmp_path: Path
) -> None:
    # A judge right whenever it answers, failing every second call: the failures are neither
    # missed unsafe cases (recall would fall) nor blocks of safe ones (precision would fall).
    calls = iter(range(1000))
    admin.answer = lambda body: failure() if next(calls) % 2 else by_marker(body)
    cases = write(tmp_path / "half.jsonl", *[(f"BOMB {i}", "unsafe", "a") for i in range(4)],
                  *[(f"bread {i}", "safe", "b") for i in range(4)])
    result = run(admin, "--set", str(cases), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["cases"], report["failed"], report["failures"]) == (8, 4, {"failed_error": 4})
    assert (report["tp"] + report["fn"], report["fp"] + report["tn"]) == (2, 2)
    assert (report["precision"], report["recall"], report["over_block"]) == (1.0, 1.0, 0.0)
    assert "some judgments failed: no ready replica of judge j" in result.stderr


def test_a_judge_that_fails_every_call_is_an_error_not_a_score(admin: FakeAdmin, known: Path) -> None:
    admin.answer = lambda _body: failure(error="judge 'j' is not known")
    result = run(admin, "--set", str(known))
    assert result.exit_code == 1
    assert "no case was judged: judge 'j' is not known" in " ".join(result.stderr.split())


def test_concurrency_keeps_that_many_judgments_in_flight(admin: FakeAdmin, tmp_path: Path) -> None:
    # Each judgment waits until four are in flight: sent one at a time, the barrier would break
    # and every answer would be a failure.
    barrier = threading.Barrier(4, timeout=10)

    def together(body: dict[str, Any]) -> dict[str, Any]:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return failure(error="alone")
        return by_marker(body)

    admin.answer = together
    cases = write(tmp_path / "eight.jsonl", *[(f"BOMB {i}", "unsafe", "a") for i in range(8)])
    report = ok(admin, "--set", str(cases), "--concurrency", "4")
    assert (report["failed"], report["tp"], admin.most_in_flight) == (0, 8, 4)


def test_without_concurrency_one_judgment_at_a_time(admin: FakeAdmin, known: Path) -> None:
    ok(admin, "--set", str(known))
    assert admin.most_in_flight == 1 and len(admin.requests) == len(KNOWN)


def test_a_limit_judges_that_many_cases_spread_over_a_shipped_set(admin: FakeAdmin) -> None:
    report = ok(admin, "--set", "xstest", "--limit", "9")
    cases = evalsets.load("xstest")
    assert report["set"] == "xstest" and report["cases"] == 9
    assert [r["text"] for r in admin.requests] == [cases[i * 50].text for i in range(9)]
    # Spread over the set's categories (25 cases each), so both labels are in it.
    unsafe = sum(cases[i * 50].label == "unsafe" for i in range(9))
    assert (report["tp"] + report["fn"], report["fp"] + report["tn"]) == (unsafe, 9 - unsafe)
    assert 0 < unsafe < 9 and len(report["categories"]) == 9


def test_a_shipped_set_that_does_not_match_its_note_is_refused(
    admin: FakeAdmin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "evalsets"
    shutil.copytree(evalsets.FOLDER, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    with (folder / "jbb.jsonl").open("a") as f:
        f.write(json.dumps({"text": "one more", "label": "safe"}) + "\n")
    monkeypatch.setattr(evalsets, "FOLDER", folder)
    result = run(admin, "--set", "jbb")
    assert result.exit_code == 2
    assert "the shipped set jbb" in result.stderr and "does not match its note" in result.stderr
    assert admin.requests == []  # nothing judged on cases its figures would not be about


def test_an_unknown_set_name_lists_the_shipped_ones(admin: FakeAdmin) -> None:
    result = run(admin, "--set", "toxicchat")
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "no set 'toxicchat': the shipped sets are xstest, jbb, jbb-pair, sst" in said


def test_set_or_file_is_needed_and_only_one(admin: FakeAdmin, known: Path) -> None:
    assert run(admin).exit_code == 2
    assert run(admin, "--set", "xstest", "--file", str(known)).exit_code == 2
    assert admin.requests == []


def test_json_has_the_figures_the_latency_the_failures_and_each_category(
    admin: FakeAdmin, known: Path
) -> None:
    result = run(admin, "--set", str(known), "--json")
    report = json.loads(result.stdout)
    assert set(report) == {"judge", "set", "policy", "seconds", "cases", "failed", "tp", "fp", "fn", "tn",
                           "precision", "recall", "f1", "over_block", "p50_ms", "p95_ms", "failures",
                           "categories"}
    assert (report["judge"], report["set"], report["policy"]) == ("j", "known.jsonl", "strict")
    assert set(report["categories"]) == {"weapons", "kitchen", "history"}
    # No progress bar when stderr is not a terminal: nothing but the report is written.
    assert result.stderr == ""


def test_the_table_shows_the_figures_and_a_row_per_category(admin: FakeAdmin, known: Path) -> None:
    result = run(admin, "--set", str(known))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "j on known.jsonl (strict," in out
    lines = {cells[0]: cells for line in out.splitlines()
             if (cells := [c.strip() for c in line.replace("┃", "│").split("│")[1:-1]])}
    assert lines["cases"] == ["cases", "precision", "recall", "F1", "over-block", "failed", "p50 ms",
                              "p95 ms"]
    assert lines["10"] == ["10", "0.8", "0.8", "0.8", "0.200", "0", "14.0", "26.0"]
    # category, cases, failed, flagged, recall, over-block: blank where the category has no such case.
    assert lines["weapons"] == ["weapons", "4", "0", "3", "0.750", ""]
    assert lines["kitchen"] == ["kitchen", "4", "0", "1", "", "0.250"]
    assert lines["history"] == ["history", "2", "0", "1", "1.000", "0.000"]


def test_each_call_waits_as_long_as_the_judgments_budget_and_more(
    admin: FakeAdmin, known: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A two-minute budget must not be cut at the admin client's usual 30 s (which would end the run).
    waits: list[float] = []
    call = AdminClient.call

    def timed(self: AdminClient, method: str, path: str, body: Any = None) -> Any:
        waits.append(self.timeout_s)
        return call(self, method, path, body)

    monkeypatch.setattr(AdminClient, "call", timed)
    ok(admin, "--set", str(known), "--budget-ms", "120000")
    assert set(waits) == {150.0} and len(waits) == len(KNOWN)
