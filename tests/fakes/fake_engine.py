"""A stand-in engine for fault injection: it serves `GET /health` and misbehaves on request.

    python fake_engine.py --port P [--host H] --mode ok|slow|crash|hang-on-term [options] [ignored…]

Modes:
  ok            healthy at once
  slow          503 "loading" for --ready-after seconds, then 200
  crash         prints "fatal: out of memory" to stderr and exits 3, before it ever answers
                (--crash-at before) or right after its first healthy answer (--crash-at after)
  hang-on-term  healthy at once, and ignores SIGTERM

--crash-signal NAME makes a crash a death by that signal (ILL, SEGV, BUS, KILL…) instead of exit 3;
--crash-unless ARG crashes only when ARG is not among its arguments (an engine that runs once
started with a remedy, such as --no-repack).

--worker starts a child process of its own (like an engine's helper), to check it is stopped too.
Unknown arguments are ignored, so any engine-style argv can be passed.

It also answers `POST /v1/chat/completions` with a fixed reply naming --alias and its port (so a
test sees which replica answered), and, like llama-server, refuses any request but /health
without `Authorization: Bearer $LLAMA_API_KEY` when that variable is set.

`POST /completion` (a judge's raw prompt) is answered with a verdict after --completion-after
seconds (a negative value: never), and each one is written to stdout as
`completion id_slot=N prompt=…` when it arrives and `completion answered id_slot=N` when it is
answered, so a test sees what an engine was asked and when.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CRASH_CODE = 3
CRASH_LINE = "fatal: out of memory"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--mode", choices=["ok", "slow", "crash", "hang-on-term"], default="ok")
    parser.add_argument("--ready-after", type=float, default=1.0)
    parser.add_argument("--crash-at", choices=["before", "after"], default="before")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--alias", default="fake")
    parser.add_argument("--crash-signal", default=None)
    parser.add_argument("--crash-unless", default=None)
    parser.add_argument("--completion-after", type=float, default=0.0)
    args, ignored = parser.parse_known_args()
    if args.mode == "crash" and args.crash_unless and args.crash_unless in ignored:
        args.mode = "ok"

    if args.mode == "hang-on-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.write(f"fake engine pid {os.getpid()} mode {args.mode} port {args.port}\n")
    sys.stdout.flush()

    if args.worker:
        # The worker carries the engine's arguments too, so a test can find it by them.
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *sys.argv[1:]])
        sys.stdout.write(f"worker pid {worker.pid}\n")
        sys.stdout.flush()

    if args.mode == "crash" and args.crash_at == "before":
        crash(args.crash_signal)

    started = time.monotonic()
    answered_healthy = threading.Event()

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/health":
                self.send_error(404)
                return
            loading = args.mode == "slow" and time.monotonic() - started < args.ready_after
            body = b'{"status":"loading"}' if loading else b'{"status":"ok"}'
            self.send_response(503 if loading else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if not loading:
                answered_healthy.set()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            key = os.environ.get("LLAMA_API_KEY")
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}})
                return
            if self.path == "/completion":
                self._complete(json.loads(raw))
                return
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            self._send(200, {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                "model": args.alias,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": f"fake reply from port {args.port}"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            })

        def _complete(self, body: dict[str, object]) -> None:
            sys.stdout.write(f"completion id_slot={body.get('id_slot')} "
                             f"prompt={json.dumps(body.get('prompt'))}\n")
            sys.stdout.flush()
            if args.completion_after < 0:
                threading.Event().wait()
            time.sleep(args.completion_after)
            sys.stdout.write(f"completion answered id_slot={body.get('id_slot')}\n")
            sys.stdout.flush()
            self._send(200, {"content": "Safety: Safe\nCategories: None",
                             "timings": {"prompt_n": 1, "cache_n": 0, "prompt_ms": 1.0}})

        def _send(self, status: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def log_message(self, format: str, *a: object) -> None:
            pass  # keep the log to what a test looks for

    server = ThreadingHTTPServer((args.host, args.port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write("listening\n")
    sys.stdout.flush()

    if args.mode == "crash":  # --crash-at after
        answered_healthy.wait()
        crash(args.crash_signal)
    threading.Event().wait()


def crash(by_signal: str | None = None) -> None:
    sys.stderr.write(f"{CRASH_LINE}\n")
    sys.stderr.flush()
    if by_signal:
        sig = getattr(signal, "SIG" + by_signal)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two take no handler
            signal.signal(sig, signal.SIG_DFL)  # a handler Python installed must not catch it
        os.kill(os.getpid(), sig)
    os._exit(CRASH_CODE)


if __name__ == "__main__":
    main()
