"""The model-file cache: Hugging Face files fetched into the data dir, verified and resumable.

Layout: `ROOT/hf/<repo>/<revision>/<file>`, with `<file>.part` while downloading and
`<file>.meta.json` once verified. The Hub's metadata (size, the linked ETag that is the file's
SHA-256 for LFS files, the redirect to the bytes) comes from `huggingface_hub`, which honours
`HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE`; the bytes are streamed here so a download can
report progress, be cancelled, resume with a Range request, and be shared by every job that
needs the same file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

import aiohttp

from llmgw.core.errors import (
    ChecksumMismatch,
    FetchFailed,
    FetchRefused,
    InsufficientDisk,
    InvalidRequest,
    LlmgwError,
)
from llmgw.core.types import HubSource, LocalSource, Model

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
# Room left on the disk after a download, so the machine is not filled to the last byte.
DISK_MARGIN_BYTES = 256 * 2**20
GGUF_MAGIC = b"GGUF"
# One answer for every refused local path: whether the file exists, is outside the roots or is
# not a GGUF must not be told apart (that would let an admin key probe the server's disk).
LOCAL_FILE_RULE = (
    "source.path must be the absolute path of a GGUF file (or a directory, for a model whose "
    "profiles are all command engines) inside the model directories (DATA_DIR/models, or "
    "model_roots in the server's config.toml)"
)


def local_model_file(path: str, roots: Sequence[Path], directory: bool = False) -> Path:
    """The canonical path (symlinks resolved) of a local GGUF file inside one of `roots` (or,
    with `directory`, of a directory there: a `command` engine's model, such as vLLM's
    safetensors); anything else is the same InvalidRequest."""
    try:
        if "\0" in path or not os.path.isabs(path):
            raise ValueError("not absolute")
        real = Path(os.path.realpath(path, strict=True))
        if not any(real.is_relative_to(os.path.realpath(r)) for r in roots):
            raise ValueError("outside the roots")
        if directory and real.is_dir():
            return real
        # O_NOFOLLOW: `real` has no symlink left, so one swapped in since is refused.
        # O_NONBLOCK: a FIFO placed there must not hang the request.
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or f.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
                raise ValueError("not a GGUF file")
    except (OSError, ValueError) as exc:
        raise InvalidRequest(LOCAL_FILE_RULE, param="source.path") from exc
    return real


@dataclass(frozen=True)
class Remote:
    """What the Hub says about a file."""

    url: str
    size: int
    sha256: str | None
    commit: str | None


@dataclass
class _Download:
    task: asyncio.Task[Path] | None = None
    done: int = 0
    total: int = 0
    waiters: int = 0
    listeners: list[Progress] = field(default_factory=list)

    def report(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        for listener in list(self.listeners):
            listener(done, total)


class ModelFiles:
    """Fetches Hub files into `root`; one download per file however many ask for it."""

    def __init__(self, root: Path, connect_timeout_s: float = 10.0, read_timeout_s: float = 60.0):
        self.root = root
        self._timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._downloads: dict[Path, _Download] = {}

    def path_for(self, src: HubSource) -> Path:
        """Where the file lives once fetched; refuses anything that would land outside the cache."""
        base = (self.root / "hf").resolve()
        try:
            path = (base / src.repo / src.revision / src.file).resolve()
        except (OSError, ValueError) as exc:  # a NUL or an over-long name in a stored row
            raise FetchRefused(f"{src.repo}: the file name is not valid") from exc
        if not path.is_relative_to(base):
            raise FetchRefused(f"{src.repo}/{src.file} would land outside the model cache")
        return path

    def unverified(self, src: HubSource) -> bool:
        """Whether the fetched file could not be verified: the Hub published no SHA-256 for it
        (a file kept in git rather than LFS), so only its size was checked."""
        return _read_meta(self.path_for(src)).get("verified") is False

    def cached(self, src: HubSource) -> Path | None:
        """The verified file, if it has been fetched."""
        path = self.path_for(src)
        return path if path.exists() and _meta_path(path).exists() else None

    def locate(self, model: Model) -> Path | None:
        """Where a catalog model's file is on this machine: a local path that exists, or a
        fetched Hub file; None for a remote model or a file that is not here."""
        src = model.source
        if isinstance(src, LocalSource):
            return Path(src.path) if Path(src.path).is_file() else None
        return self.cached(src) if isinstance(src, HubSource) else None

    async def fetch(self, src: HubSource, progress: Progress | None = None) -> Path:
        """The verified local file, downloading (or joining a download of) it when needed."""
        path = self.path_for(src)
        running = self._downloads.get(path)
        previous = None
        if running is not None and running.task is not None and running.task.cancelling():
            previous, running = running.task, None  # abandoned and still unwinding: start afresh
        if running is None:
            running = mine = _Download()
            running.task = asyncio.create_task(
                self._fetch(src, path, running, previous), name=f"fetch-{src.repo}/{src.file}"
            )
            self._downloads[path] = running
            running.task.add_done_callback(lambda _t: self._done(path, mine))
        assert running.task is not None
        running.waiters += 1
        if progress is not None:
            running.listeners.append(progress)
            if running.total:
                progress(running.done, running.total)
        try:
            # shield: one job's cancel must not cancel a download another job shares.
            return await asyncio.shield(running.task)
        finally:
            running.waiters -= 1
            if progress is not None:
                running.listeners.remove(progress)
            if running.waiters == 0 and not running.task.done():
                # Nobody waits any more: stop downloading (the .part stays for a resume).
                running.task.cancel()

    def _done(self, path: Path, download: _Download) -> None:
        # Only its own entry: a fresh download may have replaced one that was unwinding.
        if self._downloads.get(path) is download:
            del self._downloads[path]

    async def _fetch(
        self, src: HubSource, path: Path, download: _Download, previous: asyncio.Task[Path] | None = None
    ) -> Path:
        if previous is not None:  # let the abandoned download let go of the .part first
            await asyncio.wait([previous])
        remote = await self._remote(src, path)
        if remote is None:  # offline, and the verified file is there
            return path
        meta = _read_meta(path)
        if path.exists() and meta.get("size") == remote.size and (
            remote.sha256 is None or meta.get("sha256") == remote.sha256
        ):
            download.report(remote.size, remote.size)
            return path
        part = path.with_name(path.name + ".part")
        have = part.stat().st_size if part.exists() else 0
        if have > remote.size:
            part.unlink()
            have = 0
        _check_disk(path.parent, remote.size - have, remote.size)
        logger.info("fetching %s/%s@%s (%d bytes, resuming at %d)",
                    src.repo, src.file, src.revision, remote.size, have)
        download.report(have, remote.size)
        if have == remote.size:  # every byte is there already: only the hash is left to check
            digest = await asyncio.to_thread(_hash_file, part)
        else:
            digest = await self._stream(src, remote, part, have, download)
        size = part.stat().st_size
        if size != remote.size:
            raise FetchFailed(
                f"{src.file}: the download ended at {size} of {remote.size} bytes; it resumes "
                "from there on the next try"
            )
        actual = digest.hexdigest()
        if remote.sha256 is not None and actual != remote.sha256:
            part.unlink()
            raise ChecksumMismatch(
                f"{src.repo}/{src.file}: SHA-256 {actual} does not match the published "
                f"{remote.sha256}; the file was discarded"
            )
        if remote.sha256 is None:
            logger.warning("%s/%s@%s: the Hub published no SHA-256 for this file; it was not "
                           "verified (only its size was checked)", src.repo, src.file, src.revision)
        os.replace(part, path)
        _meta_path(path).write_text(
            json.dumps({"sha256": actual, "size": size, "commit": remote.commit, "repo": src.repo,
                        "file": src.file, "revision": src.revision,
                        "verified": remote.sha256 is not None})
        )
        return path

    async def _remote(self, src: HubSource, path: Path) -> Remote | None:
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            if self.cached(src):
                return None
            raise FetchRefused(
                f"{src.repo}/{src.file} is not in the model cache and HF_HUB_OFFLINE is set"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        return await asyncio.to_thread(_metadata, src)

    async def _stream(
        self, src: HubSource, remote: Remote, part: Path, have: int, download: _Download
    ) -> hashlib._Hash:
        """Append the rest of the file to `part`; returns the SHA-256 of all of it."""
        headers = _auth_headers(remote.url)
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session, session.get(
                remote.url, headers=headers
            ) as resp:
                if resp.status == 200 and have:
                    have = 0  # the server ignored the Range: start over
                    part.unlink(missing_ok=True)
                elif resp.status not in (200, 206):
                    raise _http_error(src, resp.status)
                # Disk writes and hashing run off the event loop: it also serves traffic.
                digest = await asyncio.to_thread(_hash_file, part) if have else hashlib.sha256()
                with open(part, "ab") as out:
                    done = have
                    async for chunk in resp.content.iter_chunked(_CHUNK):
                        await asyncio.to_thread(_absorb, out, digest, chunk)
                        done += len(chunk)
                        download.report(done, remote.size)
                return digest
        except LlmgwError:
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise FetchFailed(
                f"{src.repo}/{src.file}: download interrupted ({type(exc).__name__}); it resumes "
                "on the next try"
            ) from exc


def _metadata(src: HubSource) -> Remote:
    """HEAD the file on the Hub (blocking; runs in a thread)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = hf_hub_url(src.repo, src.file, revision=src.revision)
    where = f"{src.repo}/{src.file}@{src.revision}"
    try:
        meta = get_hf_file_metadata(url, timeout=30)
    except GatedRepoError as exc:
        raise FetchRefused(f"{where}: the repo is gated; set HF_TOKEN to a token with access") from exc
    except RepositoryNotFoundError as exc:
        raise FetchRefused(
            f"{where}: repo not found (or private: set HF_TOKEN)"
        ) from exc
    except RevisionNotFoundError as exc:
        raise FetchRefused(f"{where}: revision {src.revision!r} not found") from exc
    except EntryNotFoundError as exc:
        raise FetchRefused(f"{where}: file not found in the repo") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status in (401, 403):
            raise FetchRefused(f"{where}: not allowed ({status}); check HF_TOKEN") from exc
        raise FetchFailed(f"{where}: the Hub answered {status}") from exc
    except OSError as exc:  # connection errors from the HTTP client
        raise FetchFailed(f"{where}: cannot reach the Hub: {exc}") from exc
    except Exception as exc:  # the HTTP client's own transport errors
        raise FetchFailed(f"{where}: cannot reach the Hub: {type(exc).__name__}") from exc
    if meta.size is None:
        raise FetchFailed(f"{where}: the Hub did not say the file's size")
    etag = (meta.etag or "").lower()
    return Remote(
        url=meta.location,
        size=meta.size,
        sha256=etag if _SHA256.match(etag) else None,
        commit=meta.commit_hash,
    )


def _auth_headers(url: str) -> dict[str, str]:
    """HF_TOKEN goes only to the Hub itself, never to the CDN a download is redirected to."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    if urlparse(url).netloc != urlparse(constants.ENDPOINT).netloc:
        return {"Accept-Encoding": "identity"}
    headers = dict(build_hf_headers())
    headers["Accept-Encoding"] = "identity"
    return headers


def _http_error(src: HubSource, status: int) -> LlmgwError:
    where = f"{src.repo}/{src.file}@{src.revision}"
    if status in (401, 403):
        return FetchRefused(f"{where}: not allowed ({status}); check HF_TOKEN")
    if status == 404:
        return FetchRefused(f"{where}: file not found")
    return FetchFailed(f"{where}: download answered {status}")


def _check_disk(directory: Path, needed: int, total: int) -> None:
    free = shutil.disk_usage(directory).free
    if needed + DISK_MARGIN_BYTES > free:
        raise InsufficientDisk(
            f"not enough disk in {directory}: the file needs {_gib(needed)} more "
            f"({_gib(total)} in all), {_gib(free)} is free"
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _absorb(out: BinaryIO, digest: hashlib._Hash, chunk: bytes) -> None:
    out.write(chunk)
    digest.update(chunk)


def _hash_file(path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def _read_meta(path: Path) -> dict[str, object]:
    try:
        data = json.loads(_meta_path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
