"""The node agent running a `command` engine for real (a small OpenAI-compatible server, as vLLM
or SGLang would be): its GPUs as the engine's visible devices, the engine key in its environment
and never in its argv, readiness asked with the key, a crash loop named and given up on, and a
program the node does not allow refused in words."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import psutil

from llmgw.core.types import LocalSource, Model, Profile, ReplicaState, Scaling
from llmgw.engines.crashes import GAVE_UP
from llmgw.node.agent import Assignment
from tests.factories import replica_placed
from tests.node.conftest import Reports, agent_for

SERVER = str(Path(__file__).parents[1] / "engines" / "openai_server.py")
KEY = "llmgw-engine-test-key"


def served(tmp_path: Path, *extra: str, program: str = sys.executable) -> Model:
    """A model run by the small server, which wants the engine key (as vLLM given VLLM_API_KEY)."""
    profile = Profile.model_validate({
        "name": "gpu", "engine": "command",
        "command": [program, SERVER, "--host", "{host}", "--port", "{port}", "--model", "{model}",
                    "--key-env", "SERVER_KEY", *extra],
        "env": {"SERVER_KEY": "{api_key}"}})
    return Model(name="py-chat", source=LocalSource(path=str(tmp_path)), profiles=[profile],
                 scaling=Scaling(min=1, max=1))


def placed(model: Model, devices: list[str] | None = None) -> Assignment:
    return Assignment(replica_placed("rep-1", model.name, profile="gpu", devices=devices or [],
                                     gpus=len(devices or [])), model)


async def test_a_command_engine_gets_its_devices_and_the_key_and_answers_once_ready(
    tmp_path: Path, reports: Reports
) -> None:
    model = served(tmp_path)
    agent = agent_for(tmp_path, "unused", reports, [placed(model, ["GPU-aaaa", "GPU-bbbb"])],
                      engine_key=lambda: KEY, engine_commands=frozenset({sys.executable}))
    try:
        await agent.reconcile()
        # Ready means its /v1/models answered 200: asked with the key, which it requires.
        ready = await reports.until(lambda s: s.state == ReplicaState.READY, "ready")
        assert ready.endpoint and ready.endpoint.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as http:
            body = {"model": "py-chat", "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(ready.endpoint + "/chat/completions", json=body) as refused:
                assert refused.status == 401
            async with http.post(ready.endpoint + "/chat/completions", json=body,
                                 headers={"Authorization": f"Bearer {KEY}"}) as resp:
                answer = await resp.json()
        assert answer["choices"][0]["message"]["content"] == "Hello from the command engine."
        assert ready.pid is not None
        cmdline = " ".join(psutil.Process(ready.pid).cmdline())
        assert KEY not in cmdline and "--model py-chat" in cmdline
    finally:
        await agent.stop_all()
    log = (tmp_path / "logs" / "rep-1.log").read_text()
    assert "visible devices: 'GPU-aaaa,GPU-bbbb'" in log


async def test_a_command_engine_that_keeps_failing_is_named_backed_off_and_given_up_on(
    tmp_path: Path, reports: Reports
) -> None:
    agent = agent_for(tmp_path, "unused", reports, [placed(served(tmp_path, "--fail-at-start"))],
                      engine_commands=frozenset({sys.executable}), max_failures=3)
    try:
        await agent.reconcile()
        gave_up = await reports.until(lambda s: (s.last_error or "").startswith(GAVE_UP), "given up")
    finally:
        await agent.stop_all()
    error = gave_up.last_error or ""
    assert error.startswith(f"{GAVE_UP} 3 failed starts in a row")
    assert "openai_server.py exited with code 3: the engine log's last lines say why" in error
    assert "error: no GPU found" in error  # the engine's own last words
    restarting = [s.last_error for s in reports.seen if s.state == ReplicaState.STARTING and s.last_error]
    assert restarting and restarting[-1].startswith("restarting after 2 failed start(s)")


async def test_a_program_the_node_does_not_allow_is_refused_in_words(
    tmp_path: Path, reports: Reports
) -> None:
    agent = agent_for(tmp_path, "unused", reports, [placed(served(tmp_path))],
                      engine_commands=frozenset({"vllm"}))
    try:
        await agent.reconcile()
        failed = await reports.until(lambda s: s.state == ReplicaState.FAILED, "refused")
    finally:
        await agent.stop_all()
    assert f"does not run command engines with program {sys.executable!r} (allowed: vllm)" in (
        failed.last_error or "")
    assert not (tmp_path / "logs" / "rep-1.log").exists()  # nothing was started
