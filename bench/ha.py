"""HA figures: how long a leader's death stops the control plane, and what a second server adds.

    .venv/bin/python bench/ha.py [--runs 10] [--duration 10] [--conns 32]

Run it through `bash bench/ha.sh`, which installs what it needs (PostgreSQL, nginx, wrk) first.

1. Failover: two `llmgw server run` on one PostgreSQL. The leader is killed with SIGKILL; the
   time from the kill to the end of the new leader's first replica-keeper pass (the
   `last_reconcile_at` it reports in `GET /admin/v1/cluster`) is one sample. The killed server
   comes back as a follower before the next run. Done with the default lease timings (what an
   install gets) and with short ones, so the part the lease TTL plays is visible.
2. Requests/s: a fixed upstream (nginx) behind a remote model, loaded with wrk through one
   server, then through two servers at once (half the connections each), side by side.
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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.pg import fresh_database, start_cluster  # noqa: E402
from tests.support.server_process import LlmgwServer, free_port, wait_for  # noqa: E402

SHORT = {"leader_ttl_s": 3.0, "leader_renew_deadline_s": 2.0, "leader_retry_s": 0.5}
DEFAULT = {"leader_ttl_s": 15.0, "leader_renew_deadline_s": 10.0, "leader_retry_s": 2.0}


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def set_config(server: LlmgwServer, **values: Any) -> None:
    """Rewrite keys of the server's config.toml (flat `[server]` scalars)."""
    path = server.data_dir / "config.toml"
    text = path.read_text()
    for key, value in values.items():
        line = f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"'
        text, n = re.subn(rf"^{key} = .*$", line, text, flags=re.M)
        if not n:
            text += line + "\n"
    path.write_text(text)


def twin(first: LlmgwServer, data_dir: Path) -> LlmgwServer:
    """A second server of the same install: the first one's config with its own port."""
    data_dir.mkdir(parents=True)
    shutil.copy(first.data_dir / "config.toml", data_dir / "config.toml")
    port = free_port()
    env = {**first.env, "LLMGW_DATA_DIR": str(data_dir), "LLMGW_URL": f"http://127.0.0.1:{port}"}
    second = LlmgwServer(data_dir, port, first.admin_key, env)
    set_config(second, port=port)
    return second


def install(root: Path, pg_url: str) -> tuple[LlmgwServer, LlmgwServer]:
    url = fresh_database(pg_url)
    a = LlmgwServer.init(root / "a", "--database", url, "--no-guard", "--no-embedded-node")
    return a, twin(a, root / "b")


def cluster(server: LlmgwServer) -> dict[str, Any]:
    return dict(server.get("/admin/v1/cluster"))


# --- failover --------------------------------------------------------------------------------


def failover_runs(root: Path, pg_url: str, timings: dict[str, float], runs: int) -> list[float]:
    servers = install(root, pg_url)
    for s in servers:
        set_config(s, **timings)
    samples: list[float] = []
    try:
        for s in servers:
            s.start()
        for i in range(runs):
            leader = wait_for("a leader", lambda: next(
                (s for s in servers if s.proc and s.proc.poll() is None and cluster(s)["leading"]),
                None), 60, every_s=0.05)
            other = next(s for s in servers if s is not leader)
            wait_for("the other server to be up",
                     lambda other=other: cluster(other)["servers"], 30)
            epoch = cluster(leader)["epoch"]
            assert leader.proc is not None
            killed_at = time.time()
            leader.proc.send_signal(signal.SIGKILL)
            leader.proc.wait()

            def took_over(other: LlmgwServer = other, epoch: int = epoch) -> str | None:
                c = cluster(other)
                return c["last_reconcile_at"] if c["leading"] and c["epoch"] > epoch else None

            stamp = wait_for("the new leader's first reconcile", took_over, 120, every_s=0.02)
            samples.append(datetime.fromisoformat(stamp).timestamp() - killed_at)
            log(f"failover run {i + 1}/{runs}: {samples[-1]:.2f} s")
            leader.start()  # back as a follower for the next run
    finally:
        for s in servers:
            s.stop()
    return samples


# --- requests/s ------------------------------------------------------------------------------


NGINX_CONF = """worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location = /v1/chat/completions {{
            default_type application/json;
            return 200 '{body}';
        }}
    }}
}}
"""
ANSWER = ('{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"fake",'
          '"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the bench '
          'upstream."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":7,'
          '"total_tokens":16}}')


@dataclass
class Load:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def wrk(url: str, key: str, conns: int, threads: int, seconds: int) -> subprocess.Popen[str]:
    env = {**os.environ, "BENCH_MODEL": "fake", "BENCH_STREAM": "false", "BENCH_KEY": key}
    return subprocess.Popen(
        ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "-s", str(ROOT / "bench/chat.lua"),
         url + "/v1/chat/completions"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def result(proc: subprocess.Popen[str]) -> Load:
    out, _ = proc.communicate()
    m = re.search(r"RESULT rps=([\d.]+) p50_ms=([\d.]+) p99_ms=([\d.]+) requests=\d+ errors=(\d+)", out)
    if m is None:
        raise RuntimeError(f"no RESULT line from wrk:\n{out}")
    return Load(float(m[1]), float(m[2]), float(m[3]), int(m[4]))


def rps_runs(root: Path, pg_url: str, conns: int, seconds: int) -> list[tuple[str, Load]]:
    port = free_port()
    (root / "nginx").mkdir(parents=True)
    conf = root / "nginx" / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=root / "nginx", port=port, body=ANSWER))
    nginx = subprocess.Popen(["nginx", "-p", str(root / "nginx"), "-e", str(root / "nginx.log"),
                              "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a, b = install(root, pg_url)
    try:
        for s in (a, b):
            s.start()
        a.ctl("model", "add", "fake", "--base-url", f"http://127.0.0.1:{port}/v1")
        out = a.ctl("key", "create", "bench").stdout
        key = max(re.findall(r"sk-llmgw-[A-Za-z0-9_-]{40,}", out), key=len)
        for s in (a, b):  # each server's routing table has the model
            wait_for(f"{s.url} routing fake", lambda s=s: "fake" in str(s.get("/v1/models")), 15)
        result(wrk(a.url, key, conns, 2, 2))  # warm-up
        rows = [("1 server", result(wrk(a.url, key, conns, 2, seconds)))]
        pair = [wrk(s.url, key, conns // 2, 1, seconds) for s in (a, b)]
        loads = [result(p) for p in pair]
        rows.append(("2 servers", Load(sum(x.rps for x in loads), max(x.p50_ms for x in loads),
                                       max(x.p99_ms for x in loads), sum(x.errors for x in loads))))
        return rows
    finally:
        for s in (a, b):
            s.stop()
        nginx.terminate()
        nginx.wait()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="failover runs per timing")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--conns", type=int, default=32, help="wrk connections in all")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--skip-rps", action="store_true")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="llmgw-ha-bench-"))
    os.chmod(tmp, 0o755)
    pg = start_cluster(tmp / "pg", "bench")
    try:
        lines = [f"# llmgw HA bench: {os.cpu_count()} cores, "
                 f"load average {os.getloadavg()[0]:.2f}", ""]
        if not args.skip_failover:
            lines += ["## Failover: kill -9 the leader → the new leader's first reconcile", "",
                      "| lease timings (ttl / renew deadline / retry) | runs | p50 s | p99 s "
                      "| min s | max s |",
                      "|---|---:|---:|---:|---:|---:|"]
            for name, timings in (("default 15 / 10 / 2 s", DEFAULT), ("short 3 / 2 / 0.5 s", SHORT)):
                log(f"failover with {name} lease timings")
                samples = failover_runs(tmp / f"failover-{timings['leader_ttl_s']:g}", pg.url,
                                        timings, args.runs)
                lines.append(f"| {name} | {len(samples)} | {statistics.median(samples):.2f} | "
                             f"{pct(samples, 0.99):.2f} | {min(samples):.2f} | {max(samples):.2f} |")
            lines.append("")
        if not args.skip_rps:
            log(f"requests/s through 1 and 2 servers, {args.conns} connections, {args.duration} s")
            rows = rps_runs(tmp / "rps", pg.url, args.conns, args.duration)
            lines += [f"## Requests/s through llmgw, {args.conns} connections in all, "
                      f"{args.duration} s (upstream: nginx, fixed JSON)", "",
                      "| servers | rps | p50 ms | p99 ms | errors | vs 1 server |",
                      "|---|---:|---:|---:|---:|---:|"]
            base = rows[0][1].rps
            for name, load in rows:
                lines.append(f"| {name} | {load.rps:,.0f} | {load.p50_ms:.2f} | {load.p99_ms:.2f} "
                             f"| {load.errors} | {load.rps / base:.2f}× |")
        text = "\n".join(lines) + "\n"
        print(text)
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "ha.md").write_text(text)
    finally:
        pg.stop()
        pg.remove()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
