"""`llmgw doctor`: the start-up checks, each with what it found and what to do.

Data dir, config, port, database, the GPUs (NVIDIA's driver and CUDA versions), the engine
binary and the GPU devices it can use, model files, and a probe of the engine on a real model,
on a GPU when there is one (which also teaches this host's engine record what it needs, see
`node.engine_compat`). Nothing here changes the install but that record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from llmgw.core.errors import LlmgwError
from llmgw.core.settings import ServerSettings, load
from llmgw.core.types import LocalSource, Model
from llmgw.engines import crashes, llamacpp
from llmgw.engines.crashes import Exit
from llmgw.node.engine_compat import FILE_NAME as COMPAT_FILE
from llmgw.node.engine_compat import EngineCompat
from llmgw.node.engine_probe import EngineDevice, check_engine, list_devices
from llmgw.node.files import ModelFiles
from llmgw.node.gpus import GpuFinder, GpuRules, Inventory
from llmgw.store.db import redact
from llmgw.store.store import Store


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One check's outcome, said for an operator."""

    name: str
    verdict: Verdict
    detail: str


@dataclass
class Doctor:
    """Runs the checks against one data dir; `model` overrides the model the probe runs."""

    data_dir: Path
    model: Path | None = None
    probe: bool = True
    find_binary: Callable[[], str] = llamacpp.find_binary
    # This machine's GPUs: through NVML, as the config's `gpu_classes` and `hide_gpus` say.
    gpus: GpuFinder | None = None

    def run(self) -> list[Check]:
        """Every check, in the order a start meets them; later ones are skipped when an earlier
        one they need failed."""
        checks = [self._data_dir()]
        try:
            settings = load(self.data_dir)
        except LlmgwError as exc:
            return [*checks, Check("config", Verdict.FAIL, exc.message)]
        checks.append(Check("config", Verdict.OK, str(self.data_dir / "config.toml")))
        checks.append(_port(settings))
        models, check = self._catalog(settings)
        checks.append(check)
        finder = self.gpus or GpuFinder.here(GpuRules(settings.gpu_classes,
                                                      frozenset(settings.hide_gpus)))
        found = finder.look()
        checks += _gpus(found)
        try:
            binary = self.find_binary()
        except LlmgwError as exc:
            return [*checks, Check("engine binary", Verdict.FAIL, exc.message)]
        checks.append(_binary_runs(binary))
        backends = _backends(binary, found)
        checks.append(backends[0])
        files = ModelFiles(self.data_dir / "models")
        checks += [_model_file(m, files) for m in models if not m.is_remote]
        if self.probe:
            # On the first GPU when the engine can use one: what a GPU replica runs.
            gpu = found.gpus[0] if found.gpus and backends[1] else None
            checks += self._probe(binary, models, files, gpu.uuid if gpu else None,
                                  f"GPU {gpu.index} {gpu.gpu_class}, " if gpu else "")
        return checks

    def _data_dir(self) -> Check:
        d = self.data_dir
        if not d.is_dir():
            return Check("data dir", Verdict.FAIL, f"{d} does not exist: run `llmgw server init`")
        try:
            with tempfile.NamedTemporaryFile(dir=d, prefix=".doctor-"):
                pass
        except OSError as exc:
            return Check("data dir", Verdict.FAIL,
                         f"{d} is not writable by uid {os.getuid()}: {exc.strerror}")
        return Check("data dir", Verdict.OK, f"{d} (writable)")

    def _catalog(self, settings: ServerSettings) -> tuple[list[Model], Check]:
        url = settings.database_url(self.data_dir)
        try:
            store = Store.open(url, migrate_schema=False)
        except LlmgwError as exc:
            return [], Check("database", Verdict.FAIL, exc.message)
        try:
            models = store.catalog.list()
        except Exception as exc:  # any driver error: said in one line, the password hidden
            return [], Check("database", Verdict.FAIL,
                             f"cannot read the catalog from {redact(url)}: {type(exc).__name__} "
                             "(is it migrated? `llmgw server run` migrates it)")
        finally:
            store.close()
        return models, Check("database", Verdict.OK, f"{redact(url)}: {len(models)} model(s)")

    def _probe(self, binary: str, models: list[Model], files: ModelFiles, gpu: str | None,
               where: str) -> list[Check]:
        model = self.model or _smallest(models, files)
        if model is None:
            return [Check("engine probe", Verdict.WARN, "no model file to probe with: pass "
                                                        "--model PATH.gguf")]
        compat = EngineCompat(self.data_dir / COMPAT_FILE)
        tries = asyncio.run(check_engine(binary, model, self.data_dir / "logs", compat,
                                         datetime.now(UTC), gpu))
        out = []
        for t in tries:
            args = where + (" ".join(t.args) or "no extra args")
            if t.ok:
                out.append(Check(f"engine probe ({args})", Verdict.OK, f"{model.name}: {t.detail}"))
            else:
                out.append(Check(f"engine probe ({args})", Verdict.FAIL, t.detail))
        if len(tries) == 2 and tries[1].ok:
            out[0] = Check(out[0].name, Verdict.WARN, out[0].detail)
            out.append(Check("engine flags", Verdict.OK,
                             f"this host runs {binary} with {' '.join(tries[1].args)} from now on "
                             f"(recorded in {self.data_dir / COMPAT_FILE})"))
        return out


def _gpus(found: Inventory) -> list[Check]:
    """The GPUs this machine offers, with NVIDIA's driver and CUDA versions."""
    if found.no_nvml is not None:
        return [Check("GPUs", Verdict.OK, f"none found ({found.no_nvml}): a CPU node")]
    driver = Check("NVIDIA driver", Verdict.OK,
                   f"{found.driver or 'version unknown'}, CUDA {found.cuda or 'unknown'}")
    if not found.gpus:
        return [driver, Check("GPUs", Verdict.OK, "none offered: a CPU node")]
    return [driver, *(Check(f"GPU {g.index}", Verdict.OK,
                            f"{g.name} as {g.gpu_class}: {g.memory_gb:.1f} GB, {g.free_gb or 0:.1f} "
                            f"GB free, compute capability {g.compute_capability or 'unknown'}, "
                            f"{g.uuid}") for g in found.gpus)]


def _backends(binary: str, found: Inventory) -> tuple[Check, list[EngineDevice]]:
    """The GPU devices the engine can use, and whether that suits the GPUs found."""
    name = "engine GPU backends"
    devices = list_devices(binary)
    if isinstance(devices, str):
        return Check(name, Verdict.WARN, devices), []
    listed = "; ".join(f"{d.id}: {d.name}" for d in devices)
    if devices:
        return Check(name, Verdict.OK, listed), devices
    if found.gpus:
        return Check(name, Verdict.WARN,
                     f"{binary} has no GPU backend (a CPU-only build): its replicas run on the "
                     "CPU, not on this machine's GPUs; build llama-server with CUDA (see the "
                     "how-to \"Serve on GPUs\") or name such a build with LLMGW_LLAMA_SERVER"), []
    return Check(name, Verdict.OK, "none (a CPU-only build)"), []


def _port(settings: ServerSettings) -> Check:
    where = f"{settings.host}:{settings.port}"
    with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as s:
        # As the server binds it: connections of a stopped server in TIME_WAIT do not count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((settings.host, settings.port))
        except OSError as exc:
            return Check("port", Verdict.WARN,
                         f"{where} is in use ({exc.strerror}): is llmgw already running there? "
                         "Otherwise set another with `server run --port`")
    return Check("port", Verdict.OK, f"{where} is free")


def _binary_runs(binary: str) -> Check:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("engine binary", Verdict.FAIL, f"{binary} does not run: {exc}")
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    version = next((ln.strip() for ln in text.splitlines() if "version" in ln.lower()), "")
    if done.returncode < 0:
        return Check("engine binary", Verdict.FAIL,
                     crashes.summary("llama-server", Exit(done.returncode)))
    if done.returncode != 0:
        return Check("engine binary", Verdict.FAIL,
                     f"{binary} --version exited with code {done.returncode}")
    return Check("engine binary", Verdict.OK, f"{binary} ({version or 'version unknown'})")


def _model_file(model: Model, files: ModelFiles) -> Check:
    path = files.locate(model)
    name = f"model file: {model.name}"
    if path is not None:
        with contextlib.suppress(OSError):
            return Check(name, Verdict.OK, f"{path} ({path.stat().st_size / 1e6:,.0f} MB)")
    if isinstance(model.source, LocalSource):
        return Check(name, Verdict.FAIL, f"{model.source.path} is missing or unreadable")
    return Check(name, Verdict.WARN, "not fetched yet: a node fetches it when a replica is placed")


def _smallest(models: list[Model], files: ModelFiles) -> Path | None:
    """The smallest model file present here: the cheapest probe."""
    found = [p for m in models if not m.is_remote and (p := files.locate(m)) is not None]
    sizes = {p: p.stat().st_size for p in found if p.is_file()}
    return min(sizes, key=lambda p: sizes[p]) if sizes else None
