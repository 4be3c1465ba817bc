"""The `command` engine's profile: what a template may say (refused in words when no replica
could start from it), and the argv and environment a replica starts with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.core.errors import ConfigError
from llmgw.core.types import Engine, LocalSource, Model, Profile, RemoteSource
from llmgw.engines import command

VLLM = ["vllm", "serve", "{model_path}", "--served-model-name", "{model}", "--host", "{host}",
        "--port", "{port}"]


def profile(cmd: list[str] | None = None, **over: object) -> Profile:
    return Profile.model_validate({"name": "gpu", "engine": "command",
                                   "command": VLLM if cmd is None else cmd, **over})


def refusal(**fields: object) -> str:
    with pytest.raises(ValidationError) as caught:
        Profile.model_validate({"name": "gpu", "engine": "command", **fields})
    return str(caught.value.errors()[0]["msg"])


REPLICA = command.Replica("/models/qwen", "qwen", "10.0.0.5", 41234,
                          devices=("GPU-aaaa", "GPU-bbbb"), threads=4)


def test_the_argv_is_the_template_filled_in_item_by_item_with_no_shell() -> None:
    p = profile([*VLLM, "--tensor-parallel-size", "2", "--chat-template={{ messages }}",
                 "--threads", "{threads}", "--note", "a b;$(id)"])
    assert command.argv(p, REPLICA) == [
        "vllm", "serve", "/models/qwen", "--served-model-name", "qwen", "--host", "10.0.0.5",
        "--port", "41234", "--tensor-parallel-size", "2", "--chat-template={ messages }",
        "--threads", "4", "--note", "a b;$(id)"]


def test_gpus_are_the_engines_visible_devices_unless_the_profile_names_them() -> None:
    env = command.env(profile(env={"HF_HOME": "/cache/{model}"}), REPLICA, None)
    assert env == {"HF_HOME": "/cache/qwen", "CUDA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}
    own = command.env(profile(env={"CUDA_VISIBLE_DEVICES": "{devices}", "X": "{threads}"}),
                      REPLICA, None)
    assert own == {"CUDA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb", "X": "4"}
    pinned = command.env(profile(env={"CUDA_VISIBLE_DEVICES": "0"}), REPLICA, None)
    assert pinned["CUDA_VISIBLE_DEVICES"] == "0"
    on_cpu = command.Replica("/m", "m", "127.0.0.1", 1)
    assert command.env(profile(), on_cpu, None) == {}
    assert command.argv(profile(["srv", "--port", "{port}", "--gpus={devices}"]), on_cpu)[-1] == "--gpus="


def test_the_engine_key_is_in_the_environment_and_never_in_the_argv() -> None:
    p = profile(env={"VLLM_API_KEY": "{api_key}"})
    env = command.env(p, REPLICA, "llmgw-engine-secret")
    assert env["LLMGW_ENGINE_KEY"] == "llmgw-engine-secret"
    assert env["VLLM_API_KEY"] == "llmgw-engine-secret"
    assert not any("secret" in a for a in command.argv(p, REPLICA))
    # Without a key (a test install), the variable is empty, not the placeholder's text.
    assert command.env(p, REPLICA, None)["VLLM_API_KEY"] == ""
    assert "{api_key} is for env only" in refusal(command=[*VLLM, "--api-key", "{api_key}"])


@pytest.mark.parametrize(("fields", "said"), [
    ({"command": []}, "a command engine needs a command"),
    ({"command": ["srv", "--host", "{host}"]}, "never names {port}"),
    ({"command": ["srv", "--port", "{port}", "--m", "{model_file}"]}, "unknown placeholder {model_file}"),
    ({"command": ["srv", "--port", "{port}", "{"]}, "command[3]: Single '{' encountered in format "
                                                     "string (write {{ or }} for a literal brace)"),
    ({"command": ["srv", "--port", "{port:>5}"]}, "command[2]: write a placeholder as {port}, with "
                                                  "no format"),
    ({"command": VLLM, "env": {"K": "{x!r}"}}, "env K: write a placeholder as {x}, with no format"),
    ({"command": ["{model_path}", "--port", "{port}"]}, "the program (the command's first item) "
                                                        "takes no placeholder"),
    ({"command": VLLM, "env": {"P": "{port}"}}, "env takes no {port}"),
    ({"command": VLLM, "env": {"LLMGW_ENGINE_KEY": "x"}}, "LLMGW_ENGINE_KEY is set by llmgw"),
    ({"command": VLLM, "env": {"A-B": "x"}}, "is not an environment variable name"),
    ({"command": VLLM, "ready_path": "health"}, "ready_path must be a path starting with /"),
    ({"command": VLLM, "args": ["--ctx-size", "8"]}, "takes its arguments in command, not args"),
])
def test_a_template_no_replica_could_start_from_is_refused_in_words(fields: dict[str, object],
                                                                      said: str) -> None:
    assert said in refusal(**fields)


def test_command_fields_belong_to_the_command_engine_alone() -> None:
    with pytest.raises(ValidationError, match="command, env are for engine 'command', not 'llamacpp'"):
        Profile(command=VLLM, env={"A": "1"})
    with pytest.raises(ValidationError, match="engine 'command' does not serve a remote source"):
        Model(name="m", source=RemoteSource(base_url="https://api.example.com/v1"),
              profiles=[profile()])
    served = Model(name="m", source=LocalSource(path="/models/qwen"), profiles=[profile()])
    assert served.profiles[0].engine == Engine.COMMAND


def test_readiness_and_name_follow_the_profile() -> None:
    assert command.ready_path(profile()) == "/v1/models"
    assert command.ready_path(profile(ready_path="/health")) == "/health"
    assert command.name(profile()) == "vllm"
    sglang = ["python3", "-m", "sglang.launch_server", "--port", "{port}"]
    assert command.name(profile(sglang)) == "sglang.launch_server"
    script = ["/venv/bin/python3.11", "/srv/serve.py", "--port", "{port}"]
    assert command.name(profile(script)) == "serve.py"
    assert command.name(profile(["/opt/cuda/bin/llama-server", "--port", "{port}"])) == "llama-server"


def test_a_node_runs_only_the_programs_it_allows() -> None:
    command.allowed(profile(), {"vllm"})
    with pytest.raises(ConfigError, match=r"does not run command engines with program 'vllm' "
                                          r"\(allowed: none\)"):
        command.allowed(profile(), set())
    with pytest.raises(ConfigError, match="allowed: /opt/vllm/bin/vllm"):
        command.allowed(profile(), {"/opt/vllm/bin/vllm"})
