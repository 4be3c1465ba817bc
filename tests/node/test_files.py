"""The model-file cache against a local stand-in Hub, through huggingface_hub's real metadata code."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from huggingface_hub import constants
from huggingface_hub.utils import _detect_agent
from pydantic import ValidationError

from llmgw.core.errors import (
    ChecksumMismatch,
    FetchFailed,
    FetchRefused,
    InsufficientDisk,
    InvalidRequest,
    Retryable,
)
from llmgw.core.types import HubSource
from llmgw.node import files as files_mod
from llmgw.node.files import ModelFiles, local_model_file
from tests.fakes.gguf_files import write_gguf
from tests.fakes.hub import COMMIT, FakeHub, HubFile, make_app

REPO = "acme/tiny-model"
FILE = "weights/model-q4.gguf"
SRC = HubSource(repo=REPO, file=FILE)
TOKEN = "hf_fake_token_for_tests"


@dataclass
class Hub:
    fake: FakeHub
    port: int
    endpoint: str

    def add(self, data: bytes, repo: str = REPO, name: str = FILE, **behaviour: object) -> HubFile:
        return self.fake.add(repo, name, data, **behaviour)

    def gets(self) -> list[str]:
        return [s.path for s in self.fake.seen("GET")]


@dataclass
class Progress:
    """A progress callback that remembers every report and can be waited on."""

    seen: list[tuple[int, int]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, done: int, total: int) -> None:
        self.seen.append((done, total))
        if done > 0:
            self.started.set()


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Hub]:
    fake = FakeHub()
    server = TestServer(make_app(fake), host="127.0.0.1")
    await server.start_server()
    assert server.port is not None
    endpoint = f"http://127.0.0.1:{server.port}"
    # huggingface_hub reads HF_ENDPOINT at import, into ENDPOINT and the URL template hf_hub_url formats.
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    # No token but the one a test sets: HF_TOKEN is read at each request, the token file too.
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    # build_hf_headers fetches an agent registry from the endpoint once per process (and caches it
    # under HF_HOME): settle it here so no test depends on being first.
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "agent-harnesses.json"))
    monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)
    try:
        yield Hub(fake, server.port, endpoint)
    finally:
        await server.close()


@pytest.fixture
def cache(tmp_path: Path) -> ModelFiles:
    return ModelFiles(tmp_path / "data")


async def started(progress: Progress, task: asyncio.Task[Path]) -> None:
    """Wait until the fetch `task` has bytes coming; a fetch that ends first fails the test with its error."""
    waiter = asyncio.ensure_future(progress.started.wait())
    await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    if not waiter.done():
        waiter.cancel()
        task.result()
        pytest.fail("the fetch ended before any bytes arrived")


def blob(size: int) -> bytes:
    return os.urandom(size)


def part_of(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def meta_of(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


# --- the happy path ----------------------------------------------------------------------------


async def test_a_file_is_fetched_verified_and_then_served_from_the_cache(hub: Hub, cache: ModelFiles) -> None:
    data = blob(3 * 64 * 1024 + 123)
    f = hub.add(data)
    progress = Progress()

    path = await cache.fetch(SRC, progress)

    assert path == (cache.root / "hf" / REPO / "main" / FILE).resolve()
    assert path.read_bytes() == data
    assert json.loads(meta_of(path).read_text()) == {
        "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "commit": COMMIT,
        "repo": REPO, "file": FILE, "revision": "main", "verified": True,
    }
    assert not part_of(path).exists()
    dones = [d for d, _ in progress.seen]
    assert dones == sorted(dones) and len(set(dones)) > 2
    assert progress.seen[-1] == (len(data), len(data))
    assert {t for _, t in progress.seen} == {len(data)}
    assert cache.cached(SRC) == path
    assert f.gets == 1 and hub.gets() == [f"/cdn/{f.sha256}"]

    again = Progress()
    assert await cache.fetch(SRC, again) == path
    assert f.gets == 1 and len(hub.gets()) == 1, "a verified file is not downloaded again"
    assert [s.path for s in hub.fake.seen("HEAD", f"/{REPO}/resolve/")] == [
        f"/{REPO}/resolve/main/{FILE}"
    ] * 2
    assert again.seen == [(len(data), len(data))]


async def test_a_plain_git_file_is_fetched_from_the_resolve_url(hub: Hub, cache: ModelFiles) -> None:
    data = b'{"architectures": ["Tiny"]}'
    f = hub.add(data, name="config.json", lfs=False)

    path = await cache.fetch(HubSource(repo=REPO, file="config.json"))

    assert path.read_bytes() == data and f.gets == 1
    assert hub.gets() == [f"/{REPO}/resolve/main/config.json"]
    assert json.loads(meta_of(path).read_text())["sha256"] == hashlib.sha256(data).hexdigest()


async def test_a_file_without_a_published_sha256_is_said_to_be_unverified(
    hub: Hub, cache: ModelFiles, caplog: pytest.LogCaptureFixture
) -> None:
    hub.add(b'{"architectures": ["Tiny"]}', name="config.json", lfs=False)
    hub.add(blob(1000))
    plain = HubSource(repo=REPO, file="config.json")

    await cache.fetch(plain)
    await cache.fetch(SRC)
    await cache.fetch(plain)  # from the cache: still unverified

    assert cache.unverified(plain) and not cache.unverified(SRC)
    [line] = [r for r in caplog.records if "SHA-256" in r.getMessage()]
    assert line.levelname == "WARNING" and f"{REPO}/config.json@main" in line.getMessage()
    assert "not verified" in line.getMessage()


# --- resuming ----------------------------------------------------------------------------------


async def test_a_cut_download_resumes_with_a_range_request(hub: Hub, cache: ModelFiles) -> None:
    data = blob(2 * 2**20 + 77)
    cut = 2**20
    f = hub.add(data, cut_after=cut)

    with pytest.raises(FetchFailed, match="resumes"):
        await cache.fetch(SRC)
    path = cache.path_for(SRC)
    have = part_of(path).stat().st_size
    assert 0 < have <= cut
    assert part_of(path).read_bytes() == data[:have]
    assert not path.exists() and cache.cached(SRC) is None

    assert (await cache.fetch(SRC)).read_bytes() == data
    ranges = [s.range for s in hub.fake.seen("GET")]
    assert ranges == [None, f"bytes={have}-"]
    assert f.gets == 2 and f.bytes_served == cut + len(data) - have < len(data) + cut
    assert json.loads(meta_of(path).read_text())["sha256"] == f.sha256
    assert not part_of(path).exists()


async def test_a_server_that_ignores_range_still_gives_the_right_file(hub: Hub, cache: ModelFiles) -> None:
    data = blob(2 * 2**20 + 5)
    f = hub.add(data, cut_after=2**20, ignore_range=True)
    with pytest.raises(FetchFailed):
        await cache.fetch(SRC)
    assert part_of(cache.path_for(SRC)).stat().st_size > 0

    path = await cache.fetch(SRC)

    assert path.read_bytes() == data
    assert hub.fake.seen("GET")[-1].range is not None  # asked for a range, got the whole body
    assert f.bytes_served == 2**20 + len(data)


async def test_a_complete_part_left_by_a_crash_before_the_rename_is_finished(
    hub: Hub, cache: ModelFiles
) -> None:
    """All the bytes are in `.part` (the process died before the rename): nothing is left to download.

    A `Range: bytes=<size>-` request is not satisfiable (the Hub's CDN answers 416), so asking for it
    fails the fetch on every retry; the part only needs its hash checked.
    """
    data = blob(100_000)
    f = hub.add(data)
    path = cache.path_for(SRC)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(data)

    assert (await cache.fetch(SRC)).read_bytes() == data
    assert f.bytes_served == 0


# --- refusals and failures ---------------------------------------------------------------------


async def test_a_checksum_mismatch_discards_the_file(hub: Hub, cache: ModelFiles) -> None:
    hub.add(blob(200_000), wrong_sha=True)

    with pytest.raises(ChecksumMismatch) as caught:
        await cache.fetch(SRC)

    message = str(caught.value)
    assert "SHA-256" in message and "does not match" in message and "discarded" in message
    assert REPO in message and FILE in message
    path = cache.path_for(SRC)
    assert not path.exists() and not part_of(path).exists() and not meta_of(path).exists()
    assert cache.cached(SRC) is None


@pytest.mark.parametrize(
    ("status", "error_code", "words"),
    [
        (404, None, ["file not found"]),
        (401, None, ["HF_TOKEN"]),
        (403, None, ["HF_TOKEN"]),
        (403, "GatedRepo", ["gated", "HF_TOKEN"]),
    ],
)
async def test_refusals_by_the_hub_are_permanent_and_say_why(
    hub: Hub, cache: ModelFiles, status: int, error_code: str | None, words: list[str]
) -> None:
    hub.add(b"x" * 1000, status=status, error_code=error_code)

    with pytest.raises(FetchRefused) as caught:
        await cache.fetch(SRC)

    assert REPO in caught.value.message and FILE in caught.value.message
    for word in words:
        assert word in caught.value.message
    assert hub.gets() == []


async def test_an_unknown_repo_or_revision_is_refused(hub: Hub, cache: ModelFiles) -> None:
    hub.add(b"x" * 1000)
    with pytest.raises(FetchRefused, match="acme/nothing-here.*not found.*HF_TOKEN"):
        await cache.fetch(HubSource(repo="acme/nothing-here", file=FILE))
    with pytest.raises(FetchRefused, match="revision 'v9' not found"):
        await cache.fetch(HubSource(repo=REPO, file=FILE, revision="v9"))
    with pytest.raises(FetchRefused, match="file not found"):
        await cache.fetch(HubSource(repo=REPO, file="other.gguf"))


async def test_a_hub_error_is_retryable(hub: Hub, cache: ModelFiles) -> None:
    hub.add(b"x" * 1000, status=500)
    with pytest.raises(FetchFailed, match="500") as caught:
        await cache.fetch(SRC)
    assert isinstance(caught.value, Retryable)
    assert hub.gets() == []


@pytest.mark.parametrize(("status", "error"), [(403, FetchRefused), (404, FetchRefused), (503, FetchFailed)])
async def test_an_error_from_the_cdn_is_classified(
    hub: Hub, cache: ModelFiles, status: int, error: type[Exception]
) -> None:
    hub.add(b"x" * 1000, cdn_status=status)
    with pytest.raises(error, match=str(status) if error is FetchFailed else REPO):
        await cache.fetch(SRC)
    assert not cache.path_for(SRC).exists()


# --- names that would escape the cache ---------------------------------------------------------


@pytest.mark.parametrize(
    ("repo", "file"),
    [("../x", "model.gguf"), (REPO, "../../etc/passwd"), (REPO, "/etc/passwd"), (REPO, "a/../../b")],
)
def test_a_hub_source_rejects_traversal(repo: str, file: str) -> None:
    with pytest.raises(ValidationError):
        HubSource(repo=repo, file=file)


@pytest.mark.parametrize(
    "file",
    ["model\x00.gguf", "weights\\model.gguf", "a/./model.gguf", "a//model.gguf", "model.gguf/",
     "line\nbreak.gguf", "x" * 201 + ".gguf", "/".join(["d"] * 300), "m\x7f.gguf", ""],
)
def test_a_hub_file_name_with_a_nul_a_backslash_or_odd_parts_is_refused(file: str) -> None:
    with pytest.raises(ValidationError) as caught:
        HubSource(repo=REPO, file=file)
    assert "file must be a relative path" in str(caught.value)


@pytest.mark.parametrize("file", ["model.gguf", "Q4_K_M/m-00001-of-00002.gguf", "m+v2@(x)[1],=.gguf"])
def test_ordinary_hub_file_names_are_accepted(file: str) -> None:
    assert HubSource(repo=REPO, file=file).file == file


def test_a_stored_row_with_a_nul_is_refused_not_an_internal_error(cache: ModelFiles) -> None:
    src = HubSource.model_construct(kind="hf", repo=REPO, revision="main", file="m\x00.gguf")
    with pytest.raises(FetchRefused, match="file name is not valid"):
        cache.path_for(src)


@pytest.mark.parametrize(
    ("repo", "revision", "file"),
    [
        ("../../x", "main", "model.gguf"),
        (REPO, "main", "../../../../etc/passwd"),
        (REPO, "main", "/etc/passwd"),
        (REPO, "../../../..", "b"),
        (REPO, "main", "a/../../../../../b"),
    ],
)
async def test_the_cache_refuses_a_path_outside_its_root(
    hub: Hub, cache: ModelFiles, repo: str, revision: str, file: str
) -> None:
    src = HubSource.model_construct(kind="hf", repo=repo, revision=revision, file=file)
    with pytest.raises(FetchRefused, match="outside the model cache"):
        cache.path_for(src)
    with pytest.raises(FetchRefused):
        await cache.fetch(src)
    assert hub.fake.requests == []


# --- sharing and cancelling --------------------------------------------------------------------


Fetching = tuple[asyncio.Task[Path], Progress]


async def start_two(cache: ModelFiles, f: HubFile) -> tuple[Fetching, Fetching]:
    """Two fetches of one file, the second joining once the first has bytes coming."""
    f.release = asyncio.Event()
    p1, p2 = Progress(), Progress()
    t1 = asyncio.create_task(cache.fetch(SRC, p1))
    await started(p1, t1)
    t2 = asyncio.create_task(cache.fetch(SRC, p2))
    await started(p2, t2)  # joined: it was told the progress so far
    return (t1, p1), (t2, p2)


async def test_two_fetches_of_one_file_share_one_download(hub: Hub, cache: ModelFiles) -> None:
    data = blob(1 * 2**20 + 3)
    f = hub.add(data)
    (t1, p1), (t2, p2) = await start_two(cache, f)
    assert f.release is not None
    f.release.set()

    first, second = await asyncio.gather(t1, t2)

    assert first == second and first.read_bytes() == data
    assert f.gets == 1 and len(hub.fake.seen("HEAD", f"/{REPO}/resolve/")) == 1
    assert p1.seen[-1] == p2.seen[-1] == (len(data), len(data))
    assert len(p2.seen) > 2  # it kept being told, not only at the start and the end


async def test_cancelling_one_of_two_waiters_keeps_the_download(hub: Hub, cache: ModelFiles) -> None:
    data = blob(1 * 2**20 + 3)
    f = hub.add(data)
    (t1, _), (t2, p2) = await start_two(cache, f)

    t1.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t1
    assert f.release is not None
    f.release.set()

    assert (await t2).read_bytes() == data
    assert f.gets == 1 and not f.aborted.is_set()
    assert p2.seen[-1] == (len(data), len(data))


async def test_cancelling_the_only_waiter_stops_the_download(hub: Hub, cache: ModelFiles) -> None:
    data = blob(2 * 2**20)
    f = hub.add(data, release=asyncio.Event())
    progress = Progress()
    task = asyncio.create_task(cache.fetch(SRC, progress))
    await started(progress, task)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert f.release is not None
    f.release.set()  # the hub tries to send the rest, and finds the connection closed
    await asyncio.wait_for(f.aborted.wait(), timeout=10)
    assert f.bytes_served < len(data)
    part = part_of(cache.path_for(SRC))
    have = part.stat().st_size
    assert have > 0 and part.read_bytes() == data[:have]

    assert (await cache.fetch(SRC)).read_bytes() == data  # and the next fetch resumes
    assert hub.fake.seen("GET")[-1].range == f"bytes={have}-"


async def test_a_fetch_that_arrives_as_the_last_waiter_leaves_gets_its_file(
    hub: Hub, cache: ModelFiles
) -> None:
    """One job gives up on a file just as another asks for it: the second must not be cancelled.

    The abandoned download is cancelled but stays registered until its task has unwound, so a fetch
    in between joins it and receives a CancelledError it never asked for.
    """
    data = blob(1 * 2**20)
    f = hub.add(data, release=asyncio.Event())
    progress = Progress()
    first = asyncio.create_task(cache.fetch(SRC, progress))
    await started(progress, first)

    first.cancel()
    second = asyncio.create_task(cache.fetch(SRC))
    with pytest.raises(asyncio.CancelledError):
        await first
    assert f.release is not None
    f.release.set()

    assert (await second).read_bytes() == data


# --- disk, offline, token ----------------------------------------------------------------------


async def test_too_little_disk_is_refused_before_any_download(
    hub: Hub, cache: ModelFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = blob(300_000)
    hub.add(data)
    free = 200 * 2**20
    asked: list[Path] = []

    def disk_usage(path: Path) -> shutil._ntuple_diskusage:
        asked.append(Path(path))
        return shutil._ntuple_diskusage(total=2**40, used=2**40 - free, free=free)

    monkeypatch.setattr(files_mod.shutil, "disk_usage", disk_usage)

    with pytest.raises(InsufficientDisk) as caught:
        await cache.fetch(SRC)

    message = caught.value.message
    assert f"{len(data) / 2**30:.2f} GiB" in message and "0.20 GiB is free" in message
    assert asked == [cache.path_for(SRC).parent]
    assert hub.gets() == [] and not part_of(cache.path_for(SRC)).exists()


async def test_offline_serves_the_cache_without_asking_the_hub(
    hub: Hub, cache: ModelFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = blob(50_000)
    hub.add(data)
    hub.add(blob(10), name="other.gguf")
    path = await cache.fetch(SRC)
    asked = len(hub.fake.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    assert await cache.fetch(SRC) == path and path.read_bytes() == data
    with pytest.raises(FetchRefused, match="HF_HUB_OFFLINE"):
        await cache.fetch(HubSource(repo=REPO, file="other.gguf"))
    assert len(hub.fake.requests) == asked


async def test_the_token_goes_to_the_hub_but_not_to_a_cdn_on_another_host(
    hub: Hub, cache: ModelFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    data = blob(100_000)
    f = hub.add(data, cdn_base=f"http://localhost:{hub.port}")

    assert (await cache.fetch(SRC)).read_bytes() == data

    (head,) = hub.fake.seen("HEAD")
    assert head.path.startswith(f"/{REPO}/resolve/") and head.authorization == f"Bearer {TOKEN}"
    (get,) = hub.fake.seen("GET")
    assert get.path == f"/cdn/{f.sha256}" and get.host == f"localhost:{hub.port}"
    assert get.authorization is None


async def test_the_token_goes_to_downloads_served_by_the_hub_itself(
    hub: Hub, cache: ModelFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.add(blob(100_000))

    await cache.fetch(SRC)

    assert {s.authorization for s in hub.fake.requests} == {f"Bearer {TOKEN}"}


async def test_no_token_is_sent_when_none_is_set(hub: Hub, cache: ModelFiles) -> None:
    hub.add(blob(1000))
    await cache.fetch(SRC)
    assert {s.authorization for s in hub.fake.requests} == {None}


# --- local model files (`ctl model add --path`) -------------------------------------------------


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """A model root holding a real GGUF, and a directory outside it holding another."""
    root, outside = tmp_path / "data" / "models", tmp_path / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    write_gguf(root / "tiny.gguf")
    write_gguf(outside / "other.gguf")
    return root, outside


def refused(path: str, roots: list[Path]) -> tuple[str, str | None]:
    with pytest.raises(InvalidRequest) as caught:
        local_model_file(path, roots)
    return caught.value.message, caught.value.param


def test_every_refused_local_path_gets_one_and_the_same_answer(roots: tuple[Path, Path]) -> None:
    root, outside = roots
    (root / "text.gguf").write_bytes(b"not a gguf, but inside the root")
    (root / "short.gguf").write_bytes(b"GG")
    (root / "escape.gguf").symlink_to(outside / "other.gguf")
    (root / "dir.gguf").mkdir()
    os.mkfifo(root / "fifo.gguf")
    cases = [
        "/etc/passwd",  # exists, outside, not a GGUF
        str(outside / "other.gguf"),  # a GGUF, outside
        str(outside / "missing.gguf"),
        str(root / "missing.gguf"),  # inside, does not exist
        str(root / "text.gguf"),  # inside, not a GGUF
        str(root / "short.gguf"),
        str(root / "escape.gguf"),  # a symlink inside to a GGUF outside
        str(root / ".." / ".." / "outside" / "other.gguf"),
        str(root / "dir.gguf"),
        str(root / "fifo.gguf"),  # must not hang either
        "tiny.gguf",  # relative
        "data/models/tiny.gguf",
        str(root / "tiny.gguf") + "\x00",
        "",
    ]
    answers = {refused(path, [root]) for path in cases}
    assert answers == {(files_mod.LOCAL_FILE_RULE, "source.path")}


def test_a_command_engines_model_may_be_a_directory_inside_a_root_and_nowhere_else(
    roots: tuple[Path, Path],
) -> None:
    root, outside = roots
    (root / "qwen").mkdir()
    (root / "escape").symlink_to(outside)
    assert local_model_file(str(root / "qwen"), [root], directory=True) == (root / "qwen").resolve()
    # llama-server's model is a file: a directory is refused there, as before.
    assert refused(str(root / "qwen"), [root]) == (files_mod.LOCAL_FILE_RULE, "source.path")
    for path in (str(outside), str(root / "escape"), "/etc", str(root / "missing")):
        with pytest.raises(InvalidRequest) as caught:
            local_model_file(path, [root], directory=True)
        assert caught.value.message == files_mod.LOCAL_FILE_RULE


def test_a_gguf_inside_a_root_is_accepted_by_its_canonical_path(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    root, outside = roots
    (tmp_path / "link").symlink_to(root)
    (root / "sub").mkdir()
    real = (root / "tiny.gguf").resolve()
    assert local_model_file(str(root / "tiny.gguf"), [root]) == real
    assert local_model_file(str(root / "." / "sub" / ".." / "tiny.gguf"), [root]) == real
    assert local_model_file(str(tmp_path / "link" / "tiny.gguf"), [root]) == real
    # A root given by the admin in config.toml counts as much as the data dir's.
    other = (outside / "other.gguf").resolve()
    assert local_model_file(str(outside / "other.gguf"), [root, outside]) == other
