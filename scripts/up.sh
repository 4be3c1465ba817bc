#!/usr/bin/env bash
# Install llmgw with llama-server and the demo model, set it up, start it, and print how to use it.
# Environment: LLMGW_DATA_DIR (default ~/.local/share/llmgw), LLMGW_PORT (default 8080),
# LLMGW_LLAMA_SERVER (a llama-server to run: nothing is built). With CUDA's compiler (nvcc on PATH or
# in /usr/local/cuda/bin) llama-server is built with CUDA (LLMGW_CUDA_ARCHITECTURES: default native).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
ensure_venv demo cuda

export LLMGW_DATA_DIR=${LLMGW_DATA_DIR:-$HOME/.local/share/llmgw}
port=${LLMGW_PORT:-8080}
init_out=$(.venv/bin/llmgw server init --demo --port "$port" --save-ctl-config)
echo "$init_out"
key=$(echo "$init_out" | grep -oE 'sk-llmgw-[A-Za-z0-9_-]{40,}' | head -n1 || true)
ctl_config=${LLMGW_CTL_CONFIG:-$HOME/.config/llmgw/ctl.toml}
if [ -z "$key" ] && [ -f "$ctl_config" ]; then
  key=$(grep -oE 'sk-llmgw-[A-Za-z0-9_-]+' "$ctl_config" | head -n1 || true)
fi
url="http://127.0.0.1:$(sed -n 's/^port = //p' "$LLMGW_DATA_DIR/config.toml")"

.venv/bin/llmgw server run --log-format text &
server=$!
# Ctrl-C stops the server and this script: without the exit the wait below would go on and
# end by saying llmgw runs, with nothing behind it.
trap 'trap - INT TERM; kill -TERM $server 2>/dev/null; wait $server; exit 130' INT TERM
for _ in $(seq 1 100); do
  curl -fsS "$url/health" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "llmgw server exited; see the messages above" >&2; exit 1; }
  sleep 0.2
done
echo "waiting for the demo model and the demo judge to be ready…"
# One look at the replicas: prints "ready N", then one line per failed start not said before
# ("fail ID RESTARTS first line of the reason"), and "gaveup ID first line" for a replica whose
# engine kept failing (llmgw no longer restarts it).
# The key goes through the environment: a command line is visible to every user (ps).
look() {
  LLMGW_ADMIN_KEY=${key:-${LLMGW_ADMIN_KEY:-}} .venv/bin/llmgw ctl --url "$url" --json replica list 2>/dev/null \
    | .venv/bin/python -c '
import json, sys
try:
    replicas = json.load(sys.stdin)["data"]
except (ValueError, KeyError, TypeError):
    replicas = []
print("ready", sum(r["state"] == "ready" for r in replicas))
for r in replicas:
    if r["state"] == "failed" and r.get("last_error"):
        kind = "gaveup" if r["last_error"].startswith("gave up after") else "fail"
        print(kind, r["model"], r["restarts"], r["last_error"].splitlines()[0])
' || true
}
said=""
for _ in $(seq 1 600); do
  kill -0 $server 2>/dev/null || { echo "llmgw server exited; see the messages above" >&2; exit 1; }
  out=$(look)
  while read -r kind model restarts reason; do
    case $kind in
      fail|gaveup)
        if [[ $said != *"|$model:$restarts|"* ]]; then
          said+="|$model:$restarts|"
          echo "  $model: failed start $restarts: $reason" >&2
        fi ;;
    esac
  done <<<"$out"
  if grep -q '^gaveup' <<<"$out"; then
    model=$(grep '^gaveup' <<<"$out" | head -n1 | cut -d' ' -f2)
    cat >&2 <<TXT

The engine of $model keeps failing to start, and llmgw stopped restarting it.
  what happened:  .venv/bin/llmgw ctl replica list   (the reason, and the engine log's path)
  engine logs:    $LLMGW_DATA_DIR/logs/
  check the host: .venv/bin/llmgw doctor   (data dir, port, engine binary, a probe of the engine)
Stopping llmgw.
TXT
    kill -TERM $server 2>/dev/null; wait $server || true
    exit 1
  fi
  n=$(sed -n 's/^ready //p' <<<"$out"); if [ "${n:-0}" -ge 2 ]; then ready=1; break; fi
  sleep 0.5
done
if [ -z "${ready:-}" ]; then
  echo "the demo replicas are not ready after 5 minutes; llmgw keeps trying: see" \
    "'.venv/bin/llmgw ctl replica list' and $LLMGW_DATA_DIR/logs/" >&2
fi

# The examples are printed flush left so that they can be pasted into a shell as they are, and
# cap the answer: the demo model would otherwise fill its whole context with text.
cat <<TXT

llmgw is running at $url  (Ctrl-C stops it and its engines)
Web console: $url/ui  (sign in with a key)
Admin key: ${key:-<shown at the first init; see $ctl_config>}

Try it:

curl $url/v1/chat/completions \\
  -H "Authorization: Bearer ${key:-\$KEY}" -H "Content-Type: application/json" \\
  -d '{"model": "gemma3-270m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}]}'

.venv/bin/python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="$url/v1", api_key="${key:-\$KEY}")
r = client.chat.completions.create(model="gemma3-270m", max_tokens=64,
                                   messages=[{"role": "user", "content": "Hello!"}])
print(r.choices[0].message.content)
PY

.venv/bin/llmgw ctl model list      # the catalog (ctl reads $ctl_config)
.venv/bin/llmgw doctor              # check this machine: engine, port, files

The demo model (gemma3-270m) is the base Gemma 3 270M, not a chat model: it continues the text
it is given, so its answers do not read like replies. For real chat, serve an instruction-tuned
model from Hugging Face and call it by the name the command prints:

.venv/bin/llmgw ctl model serve --repo unsloth/gemma-3-270m-it-GGUF --file gemma-3-270m-it-Q4_K_M.gguf --cores 1 --wait
TXT
wait $server
