"""`llmgw node run`: its options, its config file and the node it registers as."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.core.errors import ConfigError
from llmgw.node.gpus import GpuFinder, GpuRules
from llmgw.server.node_run import (
    NodeOptions,
    agent_id,
    describe,
    load_config,
    reaching_address,
    reporting,
)
from tests.fakes.nvml import A100_40GB, A100_80GB, H200, FakeNvml


def test_a_config_file_gives_the_options(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\nserver = ["http://10.0.0.1:8080"]\ntoken = "t"\n'
                    'labels = { role = "judge" }\ngpus = { l4 = 2 }\ncores = 6\n')
    cfg = load_config(path)
    assert cfg.server == ["http://10.0.0.1:8080"] and cfg.labels == {"role": "judge"}
    assert cfg.gpus == {"l4": 2} and cfg.cores == 6
    path.write_text('[node]\ngpu_classes = { a100-80gb = "a100" }\nhide_gpus = ["0", "GPU-1"]\n')
    cfg = load_config(path)
    assert (cfg.gpu_classes, cfg.hide_gpus) == ({"a100-80gb": "a100"}, ["0", "GPU-1"])


def test_a_bad_config_file_says_where(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\ncores = -1\n')
    with pytest.raises(ConfigError, match=r"\[node\] cores: Input should be greater than"):
        load_config(path)
    path.write_text('[node]\nlabel = { a = "b" }\n')  # a typo for `labels`
    with pytest.raises(ConfigError, match="label: Extra inputs are not permitted"):
        load_config(path)
    path.write_text('[node]\ngpu_classes = { a100 = "A 100" }\n')
    with pytest.raises(ConfigError, match="gpu_classes: Value error, a GPU class is 1-64 lower-case"):
        load_config(path)


def test_declared_hardware_and_labels_win_over_the_probe(tmp_path: Path) -> None:
    opts = NodeOptions(servers=["http://127.0.0.1:1"], token="t", data_dir=tmp_path,
                       node_id="n1", labels={"role": "judge"}, cores=3, memory_gb=5.5,
                       gpus={"l4": 1}, address="127.0.0.12")
    node = describe(opts, GpuFinder(FakeNvml([H200])))
    assert (node.id, node.address, node.cores, node.memory_gb, node.gpus) == \
        ("n1", "127.0.0.12", 3, 5.5, {"l4": 1})
    assert node.labels["role"] == "judge" and "hostname" in node.labels
    # `--gpu` replaces what NVML finds: the H200 is not offered, the declared L4 is.
    assert [(d.uuid, d.gpu_class, d.declared) for d in node.devices] == [("l4-0", "l4", True)]
    assert reporting(node, opts, GpuFinder(FakeNvml([H200])))() == node


def test_each_report_looks_at_the_gpus_again(tmp_path: Path) -> None:
    opts = NodeOptions(servers=["http://127.0.0.1:1"], token="t", data_dir=tmp_path,
                       node_id="n1", address="127.0.0.12",
                       gpu_rules=GpuRules(rename={"a100-40gb": "a100"}))
    lib = FakeNvml([A100_40GB, A100_80GB])
    finder = GpuFinder(lib, opts.gpu_rules)
    node = describe(opts, finder)
    report = reporting(node, opts, finder)
    assert node.gpus == {"a100": 1, "a100-80gb": 1}

    lib.set(0, utilization=97, temperature=71, free=1024**3)
    lib.lose(1)
    later = report()

    [gpu] = later.devices
    assert (gpu.gpu_class, gpu.utilization, gpu.temperature_c, gpu.free_gb) == ("a100", 0.97, 71, 1.0)
    assert later.gpus == {"a100": 1}  # the lost GPU is offered no more


def test_the_default_address_is_the_one_that_reaches_the_server() -> None:
    assert reaching_address("http://127.0.0.1:8080") == "127.0.0.1"


def test_without_a_server_or_token_it_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMGW_SERVER", raising=False)
    monkeypatch.delenv("LLMGW_NODE_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["node", "run", "--server", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "a --token" in result.output


def test_a_gpu_class_flag_that_is_no_class_is_refused() -> None:
    result = CliRunner().invoke(app, ["node", "run", "--server", "http://127.0.0.1:1", "--token",
                                      "t", "--gpu-class", "a100-80gb=A 100"])
    assert result.exit_code == 2
    assert "a GPU class is 1-64 lower-case letters" in result.output


def test_the_agent_id_survives_a_restart(tmp_path: Path) -> None:
    first = agent_id(tmp_path / "node")
    assert first.startswith("agent-") and agent_id(tmp_path / "node") == first
    assert agent_id(tmp_path / "other") != first
