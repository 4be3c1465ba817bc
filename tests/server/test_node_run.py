"""`llmgw node run`: its options, its config file and the node it registers as."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.core.errors import ConfigError
from llmgw.server.node_run import NodeOptions, agent_id, describe, load_config, reaching_address


def test_a_config_file_gives_the_options(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\nserver = ["http://10.0.0.1:8080"]\ntoken = "t"\n'
                    'labels = { role = "judge" }\ngpus = { l4 = 2 }\ncores = 6\n')
    cfg = load_config(path)
    assert cfg.server == ["http://10.0.0.1:8080"] and cfg.labels == {"role": "judge"}
    assert cfg.gpus == {"l4": 2} and cfg.cores == 6


def test_a_bad_config_file_says_where(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\ncores = -1\n')
    with pytest.raises(ConfigError, match=r"\[node\] cores: Input should be greater than"):
        load_config(path)
    path.write_text('[node]\nlabel = { a = "b" }\n')  # a typo for `labels`
    with pytest.raises(ConfigError, match="label: Extra inputs are not permitted"):
        load_config(path)


def test_declared_hardware_and_labels_win_over_the_probe(tmp_path: Path) -> None:
    opts = NodeOptions(servers=["http://127.0.0.1:1"], token="t", data_dir=tmp_path,
                       node_id="n1", labels={"role": "judge"}, cores=3, memory_gb=5.5,
                       gpus={"l4": 1}, address="127.0.0.12")
    node = describe(opts)
    assert (node.id, node.address, node.cores, node.memory_gb, node.gpus) == \
        ("n1", "127.0.0.12", 3, 5.5, {"l4": 1})
    assert node.labels["role"] == "judge" and "hostname" in node.labels


def test_the_default_address_is_the_one_that_reaches_the_server() -> None:
    assert reaching_address("http://127.0.0.1:8080") == "127.0.0.1"


def test_without_a_server_or_token_it_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMGW_SERVER", raising=False)
    monkeypatch.delenv("LLMGW_NODE_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["node", "run", "--server", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "a --token" in result.output


def test_the_agent_id_survives_a_restart(tmp_path: Path) -> None:
    first = agent_id(tmp_path / "node")
    assert first.startswith("agent-") and agent_id(tmp_path / "node") == first
    assert agent_id(tmp_path / "other") != first
