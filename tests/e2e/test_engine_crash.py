"""A real server whose engine dies of SIGILL at start: the remedy (`--no-repack`) learned and
used with the real llama-server, and an engine that keeps dying named, backed off, given up on,
and answered for at once in each dialect."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from llmgw.engines import llamacpp
from tests.support.server_process import LlmgwServer, run_cli, wait_for

pytestmark = pytest.mark.e2e

DEMO = "gemma3-270m"


def wrapper(tmp_path: Path, body: str) -> str:
    """An executable llama-server stand-in: a shell script with `body`."""
    path = tmp_path / "llama-server"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def crashing_server(tmp_path: Path) -> Iterator[LlmgwServer]:
    """The demo model (no guard) on an engine that always dies of SIGILL at start."""
    binary = wrapper(tmp_path, 'echo "load_tensors: loading model"\nkill -ILL $$\n')
    server = LlmgwServer.init(tmp_path / "data", "--demo", "--no-guard",
                              env={"LLMGW_LLAMA_SERVER": binary})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_an_engine_that_keeps_dying_of_sigill_is_named_backed_off_and_given_up_on(
    crashing_server: LlmgwServer,
) -> None:
    server = crashing_server

    def failed() -> dict[str, object] | None:
        return next((r for r in server.replicas(DEMO) if r["state"] == "failed"), None)

    first = wait_for("a failed replica", failed, 60)
    error = str(first["last_error"])
    assert error.startswith("llama-server stopped with an illegal instruction (SIGILL): this build "
                            "uses CPU instructions this machine cannot run")
    assert f"engine log: {server.data_dir / 'logs'}" in error

    # While it fails, a request is refused at once (not after the queue's 120 s), in each dialect.
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key, max_retries=0)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=DEMO, max_tokens=8,
                                       messages=[{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 30
    assert caught.value.status_code == 503
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "engine_failing"
    assert "its engine keeps failing: llama-server stopped with an illegal instruction" in body["message"]
    messages = anthropic.Anthropic(base_url=server.url, api_key=server.admin_key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        messages.messages.create(model=DEMO, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 503
    assert "keeps failing" in json.dumps(refused.value.body)

    # Backoff between starts, then a cap: it stays failed and is not restarted again.
    def given_up() -> dict[str, object] | None:
        r = failed()
        return r if r and str(r["last_error"]).startswith("gave up after 5 failed starts") else None

    final = wait_for("the supervisor to give up", given_up, 90, every_s=0.5)
    restarts = final["restarts"]
    time.sleep(3)  # two agent passes: nothing may start it again
    [after] = server.replicas(DEMO)
    assert after["state"] == "failed" and after["restarts"] == restarts
    log = server.log()
    assert "failed starts in a row; next start in 2s" in log  # the backoff, as logged
    assert "starting it again at once with --no-repack" in log  # the remedy was tried first

    # `ctl replica list` names the reason whole, not cut at its first newline.
    listed = server.ctl("replica", "list").stdout
    print(listed)  # noqa: T201 - shown when the test fails
    assert "gave up after 5 failed starts" in listed
    assert "(SIGILL)" in listed and "engine log:" in listed


def test_the_real_engine_dying_of_sigill_runs_with_no_repack_and_answers(tmp_path: Path) -> None:
    real = llamacpp.find_binary()
    # Dies of SIGILL unless started with --no-repack, as ggml's AMX kernels do on a host that
    # advertises AMX and cannot run it; with the flag it is the real llama-server.
    binary = wrapper(tmp_path, f'case " $* " in *" --no-repack "*|*" --version "*) exec "{real}" "$@";; '
                               'esac\nkill -ILL $$\n')
    server = LlmgwServer.init(tmp_path / "data", "--demo", "--no-guard",
                              env={"LLMGW_LLAMA_SERVER": binary})
    server.start()
    try:
        server.wait_ready(DEMO)
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key, max_retries=0)
        answer = client.chat.completions.create(model=DEMO, max_tokens=8,
                                                messages=[{"role": "user", "content": "Hello"}])
        assert answer.choices[0].message.content
        [replica] = server.replicas(DEMO)
        assert replica["restarts"] == 0  # the remedy is not a failure
        record = json.loads((server.data_dir / "engine-compat.json").read_text())
        assert [v["args"] for v in record.values()] == [["--no-repack"]]
    finally:
        server.stop()

    # `llmgw doctor` probes the same binary, finds what is recorded, and says all is well.
    out = run_cli("doctor", "--model", str(next((server.data_dir / "models").rglob("*.gguf"))),
                  env=server.env, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "engine probe (--no-repack)" in out.stdout and "answered a chat request" in out.stdout
