"""`command` engines on a real install: the real llama-server and a small OpenAI-compatible
server, each added with `ctl model add --command`, placed, health-checked, answering a chat
through the gateway, crashed and named in words, restarted; one that never starts backed off and
given up on, as llama-server is."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmgw.engines import llamacpp
from tests.support.server_process import LlmgwServer, wait_for

pytestmark = pytest.mark.e2e

SERVER = Path(__file__).parents[1] / "engines" / "openai_server.py"
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmgwServer]:
    """The demo install (no guard) whose node allows this Python and llama-server as programs."""
    server = LlmgwServer.init(tmp_path_factory.mktemp("llmgw") / "data", "--demo", "--no-guard")
    server.allow("engine_commands", [sys.executable, llamacpp.find_binary()])
    (server.data_dir / "models" / "py-weights").mkdir(parents=True)
    with server.running():
        yield server


def add(server: LlmgwServer, name: str, path: Path | str, argv: list[str], *extra: str) -> None:
    # 0 cores: the demo model holds the cores of a small machine.
    server.ctl("model", "add", name, "--path", str(path), "--cores", "0", "--memory-gb", "0.2",
               "--profile", "gpu", "--command", shlex.join(argv), *extra)


def small_server(*extra: str) -> list[str]:
    return [sys.executable, str(SERVER), "--host", "{host}", "--port", "{port}", "--model",
            "{model}", "--key-env", "LLMGW_ENGINE_KEY", *extra]


def restarted_after(server: LlmgwServer, model: str, pid: int, sig: signal.Signals) -> dict[str, Any]:
    """Kill the engine with `sig`; the replica once it is ready again, in a new process."""
    os.kill(pid, sig)

    def again() -> dict[str, Any] | None:
        return next((r for r in server.replicas(model) if r["state"] == "ready" and r["pid"] != pid
                     and r["restarts"] >= 1), None)

    return dict(wait_for(f"{model} ready again", again, 120, every_s=0.3))


def test_a_small_openai_compatible_server_runs_as_a_replica_and_is_named_when_it_dies(
    install: LlmgwServer,
) -> None:
    add(install, "py-chat", install.data_dir / "models" / "py-weights", small_server())
    ready = install.wait_ready("py-chat", 60)
    assert ready["profile"] == "gpu"
    shown = install.ctl("model", "resources", "py-chat").stdout
    assert "args or command" in shown and "openai_server.py" in shown
    client = openai.OpenAI(base_url=install.url + "/v1", api_key=install.admin_key, max_retries=0)
    answer = client.chat.completions.create(model="py-chat", messages=HELLO, max_tokens=8)
    assert answer.choices[0].message.content == "Hello from the command engine."
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="py-chat", messages=HELLO, max_tokens=8, stream=True) if c.choices)
    assert streamed == "Hello from the command engine."

    restarted_after(install, "py-chat", ready["pid"], signal.SIGKILL)
    assert ("openai_server.py was killed (SIGKILL), most likely by the kernel's out-of-memory "
            "killer") in install.log()
    answer = client.chat.completions.create(model="py-chat", messages=HELLO, max_tokens=8)
    assert answer.choices[0].message.content


def test_the_real_llama_server_runs_through_the_command_engine(install: LlmgwServer) -> None:
    gguf = next((install.data_dir / "models").rglob("*.gguf"))
    argv = [llamacpp.find_binary(), "--model", "{model_path}", "--host", "{host}", "--port",
            "{port}", "--alias", "{model}", "--ctx-size", "512", "--threads", "{threads}",
            "--no-webui"]
    add(install, "gemma-cmd", gguf, argv, "--env", "LLAMA_API_KEY={api_key}", "--ready-path",
        "/health")
    ready = install.wait_ready("gemma-cmd", 180)
    client = openai.OpenAI(base_url=install.url + "/v1", api_key=install.admin_key,
                           max_retries=0, timeout=120)
    answer = client.chat.completions.create(model="gemma-cmd", messages=HELLO, max_tokens=8)
    assert answer.choices[0].message.content
    # The engine key reached it through its environment (LLAMA_API_KEY={api_key}): a call
    # around the gateway, without the key, is refused.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(ready["endpoint"] + "/models", timeout=10)
    assert refused.value.code == 401

    restarted_after(install, "gemma-cmd", ready["pid"], signal.SIGSEGV)
    assert "llama-server crashed with a segmentation fault (SIGSEGV)" in install.log()


def test_a_command_engine_that_never_starts_is_backed_off_and_given_up_on(
    install: LlmgwServer,
) -> None:
    add(install, "py-broken", install.data_dir / "models" / "py-weights",
        small_server("--fail-at-start"))

    def given_up() -> dict[str, Any] | None:
        return next((r for r in install.replicas("py-broken")
                     if str(r["last_error"]).startswith("gave up after 5 failed starts")), None)

    final = wait_for("the supervisor to give up", given_up, 120, every_s=0.5)
    error = str(final["last_error"])
    assert "openai_server.py exited with code 3" in error and "error: no GPU found" in error
    assert "failed starts in a row; next start in 2s" in install.log()  # the backoff
    client = openai.OpenAI(base_url=install.url + "/v1", api_key=install.admin_key, max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="py-broken", messages=HELLO, max_tokens=8)
    assert caught.value.status_code == 503
    assert "openai_server.py exited with code 3" in caught.value.message


def test_a_program_the_node_does_not_allow_never_starts(install: LlmgwServer) -> None:
    add(install, "not-allowed", install.data_dir / "models" / "py-weights",
        ["/bin/sh", "-c", "exec sleep 100", "{port}"])

    def refused() -> dict[str, Any] | None:
        return next((r for r in install.replicas("not-allowed") if r["state"] == "failed"), None)

    failed = wait_for("the replica refused", refused, 60, every_s=0.3)
    assert "does not run command engines with program '/bin/sh'" in str(failed["last_error"])
    assert failed["pid"] is None
