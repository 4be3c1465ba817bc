#!/usr/bin/env bash
# Install llmgw with llama-server and the demo model, set it up, start it, and print how to use it.
# Environment: LLMGW_DATA_DIR (default ~/.local/share/llmgw), LLMGW_PORT (default 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
ensure_venv demo

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
trap 'kill -TERM $server 2>/dev/null; wait $server' INT TERM
for _ in $(seq 1 100); do
  curl -fsS "$url/health" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "llmgw server exited; see the messages above" >&2; exit 1; }
  sleep 0.2
done
echo "waiting for the demo model and the demo judge to be ready…"
# The key goes through the environment: a command line is visible to every user (ps).
ready_count() {
  LLMGW_ADMIN_KEY=${key:-${LLMGW_ADMIN_KEY:-}} .venv/bin/llmgw ctl --url "$url" --json replica list 2>/dev/null \
    | grep -c '"state": "ready"' || true
}
for _ in $(seq 1 600); do
  if [ "$(ready_count)" -ge 2 ]; then ready=1; break; fi
  sleep 0.5
done
[ -n "${ready:-}" ] || echo "the demo replicas are not ready yet: llmgw ctl replica list" >&2

cat <<TXT

llmgw is running at $url  (Ctrl-C stops it and its engines)
Web console: $url/ui  (sign in with a key)
Admin key: ${key:-<shown at the first init; see $ctl_config>}

  curl $url/v1/chat/completions \\
    -H "Authorization: Bearer ${key:-\$KEY}" -H "Content-Type: application/json" \\
    -d '{"model": "gemma3-270m", "messages": [{"role": "user", "content": "Hello!"}]}'

  .venv/bin/python - <<'PY'
  from openai import OpenAI
  client = OpenAI(base_url="$url/v1", api_key="${key:-\$KEY}")
  r = client.chat.completions.create(model="gemma3-270m", messages=[{"role": "user", "content": "Hello!"}])
  print(r.choices[0].message.content)
  PY

  .venv/bin/llmgw ctl model list      # the catalog (ctl reads $ctl_config)
TXT
wait $server
