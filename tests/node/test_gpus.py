"""A node finds its NVIDIA GPUs through NVML (recorded answers of real GPUs in place of pynvml),
names them by class, renames and hides them as told, and is a CPU node without the driver."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from llmgw.node import hardware, nvml
from llmgw.node.gpus import GpuFinder, GpuRules, declared, gpu_class
from tests.fakes.nvml import (
    A100_40GB,
    A100_80GB,
    ERROR_DRIVER_NOT_LOADED,
    ERROR_LIBRARY_NOT_FOUND,
    FULL_4090,
    H200,
    FakeNvml,
)

LOGGER = "llmgw.node.gpus"


@pytest.mark.parametrize(("name", "cls"), [
    ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("Tesla T4", "t4"),
    ("NVIDIA L40S", "l40s"),
    ("Tesla V100-SXM2-16GB", "v100-16gb"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA", "gpu"),
])
def test_a_gpu_is_classed_by_its_name(name: str, cls: str) -> None:
    assert gpu_class(name) == cls


def test_an_h200_is_found_with_its_memory_compute_capability_and_load() -> None:
    inventory = GpuFinder(FakeNvml([H200])).look()

    [gpu] = inventory.gpus
    assert (gpu.index, gpu.uuid, gpu.name, gpu.gpu_class) == (0, H200.uuid, "NVIDIA H200", "h200")
    assert (gpu.memory_gb, gpu.free_gb, gpu.compute_capability) == (139.8, 139.183, "9.0")
    assert (gpu.utilization, gpu.temperature_c, gpu.declared) == (0.0, 31, False)
    assert (inventory.driver, inventory.cuda) == ("550.54.15", "12.4")


def test_two_a100s_of_different_memory_are_two_classes_on_the_node() -> None:
    node = hardware.probe("n1", gpus=GpuFinder(FakeNvml([A100_40GB, A100_80GB])))

    assert [(d.index, d.gpu_class, d.memory_gb) for d in node.devices] == [
        (0, "a100-40gb", 40.0), (1, "a100-80gb", 80.0)]
    assert node.gpus == {"a100-40gb": 1, "a100-80gb": 1}
    assert node.devices[1].utilization == 0.63 and node.devices[1].temperature_c == 54


def test_a_full_device_is_reported_with_no_memory_free() -> None:
    [gpu] = GpuFinder(FakeNvml([FULL_4090])).look().gpus

    assert (gpu.gpu_class, gpu.free_gb, gpu.memory_used_gb, gpu.utilization) == (
        "rtx-4090", 0.0, gpu.memory_gb, 1.0)


def test_a_gpu_that_is_lost_is_dropped_and_said_once_while_the_node_keeps_reporting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lib = FakeNvml([A100_40GB, A100_80GB])
    finder = GpuFinder(lib)
    assert len(finder.look().gpus) == 2
    lib.lose(1)
    caplog.set_level(logging.INFO, LOGGER)

    looks = [finder.look() for _ in range(3)]

    assert all([g.uuid for g in look.gpus] == [A100_40GB.uuid] for look in looks)
    [said] = [r for r in caplog.records if r.name == LOGGER]
    assert said.levelno == logging.WARNING
    assert f"GPU 1 ({A100_80GB.uuid}, NVIDIA A100-SXM4-80GB) is lost (GPU is lost)" in said.message
    assert "dropped from this node's report" in said.message


def test_a_lost_gpu_that_answers_again_is_offered_again() -> None:
    lib = FakeNvml([A100_40GB, A100_80GB])
    finder = GpuFinder(lib)
    lib.lose(1)
    assert len(finder.look().gpus) == 1
    lib.lost.clear()

    assert [g.uuid for g in finder.look().gpus] == [A100_40GB.uuid, A100_80GB.uuid]


@pytest.mark.parametrize("error", [ERROR_LIBRARY_NOT_FOUND, ERROR_DRIVER_NOT_LOADED])
def test_without_the_driver_it_is_a_cpu_node_said_once_at_info(
    error: int, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    lib = FakeNvml([H200], init_error=error)
    finder = GpuFinder(lib)

    node = hardware.probe("n1", gpus=finder)
    again = finder.look()

    assert (node.devices, node.gpus, again.gpus, again.driver) == ([], {}, (), None)
    [said] = [r for r in caplog.records if r.name == LOGGER]
    assert said.levelno == logging.INFO
    assert said.message.startswith("no NVIDIA GPU found (NVIDIA's management library did not "
                                   "start: ")
    assert said.message.endswith("this is a CPU node")


def test_without_nvidia_ml_py_it_is_a_cpu_node(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    finder = GpuFinder(None)

    assert finder.look().gpus == () and finder.look().gpus == ()
    assert [r.message for r in caplog.records if r.name == LOGGER] == [
        "no NVIDIA GPU found (nvidia-ml-py is not installed): this is a CPU node"]


def test_the_real_binding_is_used_where_installed_and_never_fails_the_probe() -> None:
    # On this machine (no NVIDIA driver) pynvml, where installed, does not start: a CPU node.
    installed = importlib.util.find_spec("pynvml") is not None
    assert (nvml.load() is not None) == installed
    node = hardware.probe("n1", gpus=GpuFinder.here())
    assert sum(node.gpus.values()) == len(node.devices)


def test_found_gpus_are_renamed_and_hidden_by_index_or_uuid() -> None:
    lib = FakeNvml([A100_40GB, A100_80GB, H200, FULL_4090])
    rules = GpuRules(rename={"a100-40gb": "a100", "a100-80gb": "a100"},
                     hide=frozenset({"2", FULL_4090.uuid}))

    node = hardware.probe("n1", gpus=GpuFinder(lib, rules))

    assert [(d.index, d.gpu_class) for d in node.devices] == [(0, "a100"), (1, "a100")]
    assert node.gpus == {"a100": 2}


def test_declared_gpus_have_their_class_alone() -> None:
    devices = declared({"l4": 2, "a100": 1})

    assert [(d.index, d.uuid, d.gpu_class, d.declared) for d in devices] == [
        (0, "a100-0", "a100", True), (1, "l4-0", "l4", True), (2, "l4-1", "l4", True)]
