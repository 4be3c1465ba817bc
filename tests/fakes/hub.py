"""A stand-in Hugging Face Hub: the file endpoints as huggingface_hub and llmgw's model cache use them.

    python -m tests.fakes.hub --port P [--host H] --root DIR

serves each file DIR/<owner>/<name>/<file> as an LFS file of repo <owner>/<name>. In-process:
`TestServer(make_app(hub))`, with files added by `hub.add(...)` and misbehaviour set per `HubFile`.

  HEAD|GET /{repo}/resolve/{revision}/{file}   LFS file: 302, `Location: /cdn/<sha256>` (or absolute on
      `cdn_base`), `X-Linked-Etag`, `X-Linked-Size`, `X-Repo-Commit`; plain file: 200 with its bytes.
      Errors carry `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound) as the Hub's do.
  HEAD|GET /cdn/<sha256>                        the bytes; `Range: bytes=N-` answers 206 + Content-Range.
      (416 past the end). Also sends the Hub's headers: see `_cdn`.
  GET /api/agent-harnesses                      an empty registry (huggingface_hub asks once a day).
  GET /health                                   200, for a harness waiting on the subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RANGE = re.compile(r"bytes=(\d+)-")


@dataclass(frozen=True)
class Seen:
    """One request the hub received."""

    method: str
    path: str
    host: str
    authorization: str | None
    range: str | None


@dataclass
class HubFile:
    """One file in a repo, with the ways it may misbehave and what was served of it."""

    repo: str
    name: str
    data: bytes | None = None
    path: Path | None = None
    lfs: bool = True
    status: int | None = None  # answer the resolve URL with this status
    error_code: str | None = None  # X-Error-Code sent with `status` (404 defaults to EntryNotFound)
    cdn_status: int | None = None  # answer GETs of the bytes with this status
    cdn_base: str | None = None  # e.g. "http://localhost:P": an absolute Location on another host
    wrong_sha: bool = False  # publish a linked ETag that is not the bytes' SHA-256
    chunk_size: int = 64 * 1024
    chunk_delay: float = 0.0  # seconds between chunks (a slow link)
    release: asyncio.Event | None = None  # when set up, the body pauses after its first chunk until set
    cut_after: int | None = None  # close the connection after this many body bytes...
    cut_always: bool = False  # ...on every GET rather than only the next one
    ignore_range: bool = False  # answer a Range request with 200 and the whole body
    sha256: str = ""
    gets: int = 0  # GETs that sent (some of) the bytes
    bytes_served: int = 0
    first_chunk: asyncio.Event = field(default_factory=asyncio.Event)
    aborted: asyncio.Event = field(default_factory=asyncio.Event)  # the client went away mid-body

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.path.stat().st_size if self.path else 0

    @property
    def published(self) -> str:
        """The SHA-256 the hub announces (and addresses the bytes by)."""
        return hashlib.sha256(self.sha256.encode()).hexdigest() if self.wrong_sha else self.sha256

    def read(self, start: int, end: int) -> bytes:
        if self.data is not None:
            return self.data[start:end]
        assert self.path is not None
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)


@dataclass
class FakeHub:
    """The hub's state: its files, the revisions it knows and every request it saw."""

    root: Path | None = None
    # Seconds between chunks for files found under `root` (a slow link for end-to-end tests).
    chunk_delay: float = 0.0
    commit: str = COMMIT
    revisions: set[str] = field(default_factory=lambda: {"main"})
    files: dict[tuple[str, str], HubFile] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)

    def add(self, repo: str, name: str, data: bytes, **behaviour: object) -> HubFile:
        f = HubFile(repo, name, data=data, sha256=hashlib.sha256(data).hexdigest(), **behaviour)  # type: ignore[arg-type]
        self.files[(repo, name)] = f
        return f

    def seen(self, method: str | None = None, prefix: str = "/") -> list[Seen]:
        return [s for s in self.requests if s.method == (method or s.method) and s.path.startswith(prefix)]

    async def find(self, repo: str, name: str) -> HubFile | None:
        if (f := self.files.get((repo, name))) is None and self.root is not None:
            root = self.root.resolve()
            path = (root / repo / name).resolve()
            if path.is_relative_to(root) and path.is_file():
                sha = await asyncio.to_thread(_sha256_file, path)
                f = HubFile(repo, name, path=path, sha256=sha, chunk_delay=self.chunk_delay)
                self.files[(repo, name)] = f
        return f

    def knows_repo(self, repo: str) -> bool:
        return any(r == repo for r, _ in self.files) or bool(self.root and (self.root / repo).is_dir())

    def by_sha(self, sha: str) -> HubFile | None:
        return next((f for f in self.files.values() if f.lfs and f.published == sha), None)


HUB = web.AppKey("hub", FakeHub)
# huggingface_hub fetches its agent registry from the endpoint (once a day, cached under HF_HOME).
NO_AGENTS: dict[str, object] = {"standardEnvVars": [], "harnesses": {}}


def make_app(hub: FakeHub) -> web.Application:
    app = web.Application()
    app[HUB] = hub
    app.router.add_get("/health", _health)
    app.router.add_get("/api/agent-harnesses", _agents)
    app.router.add_get("/cdn/{sha}", _cdn)
    app.router.add_get("/{tail:.+}", _resolve)
    return app


async def _health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _agents(request: web.Request) -> web.Response:
    _log(request)
    return web.json_response(NO_AGENTS)


def _log(request: web.Request) -> FakeHub:
    hub = request.app[HUB]
    h = request.headers
    hub.requests.append(Seen(request.method, request.rel_url.raw_path, h.get("Host", ""),
                             h.get("Authorization"), h.get("Range")))
    return hub


def _error(status: int, code: str | None, message: str) -> web.Response:
    headers = {"X-Error-Code": code, "X-Error-Message": message} if code else {}
    return web.Response(status=status, headers=headers, text=message)


async def _resolve(request: web.Request) -> web.StreamResponse:
    hub = _log(request)
    repo, sep, rest = request.rel_url.raw_path.lstrip("/").partition("/resolve/")
    revision, _, name = rest.partition("/")
    repo, revision, name = unquote(repo), unquote(revision), unquote(name)
    if not sep or not name or not hub.knows_repo(repo):
        status = 404 if request.headers.get("Authorization") else 401
        return _error(status, "RepoNotFound", "Repository not found")
    if revision not in hub.revisions | {hub.commit}:
        return _error(404, "RevisionNotFound", "Invalid rev id")
    f = await hub.find(repo, name)
    if f is None:
        return _error(404, "EntryNotFound", "Entry not found")
    if f.status is not None:
        return _error(f.status, f.error_code or ("EntryNotFound" if f.status == 404 else None), "refused")
    headers = {"X-Repo-Commit": hub.commit, "Accept-Ranges": "bytes"}
    if not f.lfs:
        headers["ETag"] = f'"{hashlib.sha1(f.sha256.encode()).hexdigest()}"'
        return await _send(request, f, headers)
    headers |= {
        "Location": f"{f.cdn_base or ''}/cdn/{f.published}",
        "X-Linked-Etag": f'"{f.published}"',
        "X-Linked-Size": str(f.size),
        "ETag": f'"{hashlib.sha1(f.published.encode()).hexdigest()}"',
    }
    return web.Response(status=302, headers=headers)


async def _cdn(request: web.Request) -> web.StreamResponse:
    f = _log(request).by_sha(request.match_info["sha"])
    if f is None:
        return web.Response(status=404, text="no such object")
    if f.cdn_status is not None and request.method == "GET":
        return web.Response(status=f.cdn_status, text="refused")
    # huggingface_hub follows a redirect that stays on the Hub's origin and reads the metadata from
    # the final answer, so the same-origin "CDN" repeats the Hub's headers.
    headers = {"ETag": f'"{f.published}"', "X-Linked-Etag": f'"{f.published}"', "Accept-Ranges": "bytes",
               "X-Linked-Size": str(f.size), "X-Repo-Commit": request.app[HUB].commit}
    return await _send(request, f, headers)


async def _send(request: web.Request, f: HubFile, headers: dict[str, str]) -> web.StreamResponse:
    start = 0
    asked = _RANGE.fullmatch(request.headers.get("Range", ""))
    if asked and not f.ignore_range:
        start = int(asked[1])
        if start >= f.size:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{f.size}"})
    resp = web.StreamResponse(status=206 if start else 200, headers=headers)
    if start:
        resp.headers["Content-Range"] = f"bytes {start}-{f.size - 1}/{f.size}"
    resp.content_length = f.size - start
    await resp.prepare(request)
    if request.method == "HEAD":
        return resp
    f.gets += 1
    cut = f.cut_after
    if not f.cut_always:
        f.cut_after = None
    sent = 0
    try:
        for pos in range(start, f.size, f.chunk_size):
            chunk = f.read(pos, min(pos + f.chunk_size, f.size))
            if cut is not None:
                chunk = chunk[: max(cut - sent, 0)]
            await resp.write(chunk)
            sent += len(chunk)
            f.bytes_served += len(chunk)
            f.first_chunk.set()
            if cut is not None and sent >= cut:
                assert request.transport is not None
                request.transport.close()  # mid-body: the client sees a short, broken response
                return resp
            if f.release is not None:
                await f.release.wait()
            if f.chunk_delay:
                await asyncio.sleep(f.chunk_delay)
    except asyncio.CancelledError:
        f.aborted.set()
        raise
    except ConnectionError:
        f.aborted.set()  # the client went away
    return resp


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between 64 KiB chunks")
    args = parser.parse_args()

    def say(*lines: object) -> None:
        sys.stdout.write(" ".join(map(str, lines)) + "\n")
        sys.stdout.flush()

    hub = FakeHub(root=args.root, chunk_delay=args.chunk_delay)
    web.run_app(make_app(hub), host=args.host, port=args.port, print=say)


if __name__ == "__main__":
    main()
