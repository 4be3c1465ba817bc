#!/usr/bin/env bash
# Measure what llmgw adds to a request: the same load against a fake upstream (nginx) directly,
# through llmgw, and through a bare aiohttp pass-through proxy. See bench/README.md.
#
#   bash bench/run.sh
#
# Env knobs: BENCH_DURATION (s per measured run, default 10), BENCH_WARMUP (s, default 2),
# BENCH_CONCS (default "1 32"), BENCH_KEEP_TMP=1 (keep the temp dir with the logs).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION=${BENCH_DURATION:-10}
WARMUP=${BENCH_WARMUP:-2}
CONCS=${BENCH_CONCS:-"1 32"}
export PATH="$PATH:/usr/sbin:/sbin"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- 1. tools -------------------------------------------------------------------------------

ensure_load_tools
if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv and installing llmgw"
    python3 -m venv .venv
    .venv/bin/pip install -q -e . >&2
fi
PY=$PWD/.venv/bin/python
LLMGW=$PWD/.venv/bin/llmgw

# --- 2. processes: everything lives in a temp dir and dies with this script ------------------

TMP=$(mktemp -d -t llmgw-bench.XXXXXX)
chmod 755 "$TMP"
PIDS=()

cleanup() {
    local rc=$? pid i
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid ignored SIGTERM for 5 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    if ((rc != 0)); then
        for f in "$TMP"/*.log; do
            [[ -s $f ]] || continue
            log "--- last lines of $(basename "$f") ---"
            tail -n 20 "$f" >&2
        done
    fi
    if [[ ${BENCH_KEEP_TMP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_for DESC SECONDS PID CMD...: retry CMD every 0.1 s while PID lives.
wait_for() {
    local desc=$1 secs=$2 pid=$3 i
    shift 3
    for ((i = 0; i < secs * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || die "$desc: the process exited"
        sleep 0.1
    done
    die "$desc: not ready after $secs s"
}

read -r NGINX_PORT GW_PORT PT_PORT < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

# The fake upstream. nginx refuses POST to static files, so the bodies are `return`ed from two
# locations; the path, not the request body, decides JSON or SSE.
CREATED=1700000000
JSON_BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":'$CREATED',"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! This is a fixed answer from the benchmark upstream."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":20,"total_tokens":29}}'
chunk() { # chunk DELTA FINISH
    printf 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":%s,"model":"fake","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}\n\n' \
        "$CREATED" "$1" "$2"
}
SSE_BODY=$(
    chunk '{"role":"assistant","content":""}' null
    for i in $(seq 2 19); do chunk '{"content":"tok'"$i"' "}' null; done
    chunk '{}' '"stop"'
    printf 'data: [DONE]\n\n'
)$'\n\n' # $(...) strips trailing newlines; put the final blank line back
# nginx single-quoted strings: escape backslashes and single quotes; `$` would be a variable.
nginx_quote() { local s=${1//\\/\\\\}; s=${s//\'/\\\'}; printf "'%s'" "$s"; }
[[ $JSON_BODY$SSE_BODY != *'$'* ]] || die "fake bodies must not contain \$"

mkdir -p "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location = /json/v1/chat/completions {
            default_type application/json;
            return 200 $(nginx_quote "$JSON_BODY");
        }
        location = /sse/v1/chat/completions {
            default_type text/event-stream;
            add_header Cache-Control no-cache;
            return 200 $(nginx_quote "$SSE_BODY");
        }
    }
}
EOF
nginx -t -q -p "$TMP/nginx" -e "$TMP/nginx.log" -c "$TMP/nginx/nginx.conf" || die "bad nginx config"
nginx -p "$TMP/nginx" -e "$TMP/nginx.log" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx-stdout.log" 2>&1 &
PIDS+=($!)
NGINX_PID=$!
wait_for "nginx" 10 "$NGINX_PID" curl -fsS -X POST -d '{}' "http://127.0.0.1:$NGINX_PORT/json/v1/chat/completions"
log "fake upstream (nginx) on :$NGINX_PORT"

# llmgw, with its own data dir.
export LLMGW_DATA_DIR=$TMP/llmgw
COLUMNS=200 "$LLMGW" server init --no-guard --port "$GW_PORT" >"$TMP/init.log" 2>&1 || die "llmgw server init failed"
KEY=$(grep -o '^ *sk-llmgw-[A-Za-z0-9_-]*$' "$TMP/init.log" | tail -n 1 | tr -d ' ')
[[ -n $KEY ]] || die "no admin key in the output of llmgw server init"
"$LLMGW" server run --port "$GW_PORT" --log-level warning --log-format text >"$TMP/llmgw.log" 2>&1 &
PIDS+=($!)
GW_PID=$!
wait_for "llmgw /health" 30 "$GW_PID" curl -fsS "http://127.0.0.1:$GW_PORT/health"
for m in json sse; do
    LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl model add "fake-$m" \
        --base-url "http://127.0.0.1:$NGINX_PORT/$m/v1" >>"$TMP/ctl.log" 2>&1 || die "ctl model add fake-$m failed"
done
# Traffic goes through a user key with every kind of limit set (high enough never to refuse),
# so the limiter, the usage meter and the metrics are in the figures.
ADMIN_KEY=$KEY
KEY=$(LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$ADMIN_KEY COLUMNS=200 "$LLMGW" ctl key create bench \
        --rpm 100000000 --tpm 1000000000000 --concurrent 100000 --tokens-per-day 1000000000000000 \
    | grep -oE 'sk-llmgw-[A-Za-z0-9_-]{40,}' | head -n 1)
[[ -n $KEY ]] || die "ctl key create failed"
models_listed() {
    local out
    out=$(curl -fsS -H "Authorization: Bearer $KEY" "http://127.0.0.1:$GW_PORT/v1/models") || return 1
    [[ $out == *'"fake-json"'* && $out == *'"fake-sse"'* ]]
}
wait_for "llmgw routing fake-json and fake-sse" 15 "$GW_PID" models_listed
log "llmgw (pid $GW_PID) on :$GW_PORT"

# The floor.
"$PY" bench/passthrough.py --port "$PT_PORT" --upstream "http://127.0.0.1:$NGINX_PORT" >"$TMP/passthrough.log" 2>&1 &
PIDS+=($!)
PT_PID=$!
wait_for "passthrough" 15 "$PT_PID" curl -fsS -X POST -d '{}' "http://127.0.0.1:$PT_PORT/json/v1/chat/completions"
log "passthrough (pid $PT_PID) on :$PT_PORT"

# --- 3. load ---------------------------------------------------------------------------------

url_for() { # TARGET MODE
    local prefix=json
    [[ $2 == stream ]] && prefix=sse
    case $1 in
        direct) echo "http://127.0.0.1:$NGINX_PORT/$prefix/v1/chat/completions" ;;
        llmgw) echo "http://127.0.0.1:$GW_PORT/v1/chat/completions" ;;
        passthrough) echo "http://127.0.0.1:$PT_PORT/$prefix/v1/chat/completions" ;;
    esac
}
model_for() { [[ $1 == stream ]] && echo fake-sse || echo fake-json; }
stream_for() { [[ $1 == stream ]] && echo true || echo false; }

# One request per target and mode before any load: status 200 and the whole body relayed.
smoke() { # TARGET MODE
    local body status out
    body='{"model":"'$(model_for "$2")'","messages":[{"role":"user","content":"hello"}],"stream":'$(stream_for "$2")'}'
    out=$(curl -sS -o "$TMP/smoke.out" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: application/json' -d "$body" "$(url_for "$1" "$2")") || die "smoke $1 $2: curl failed"
    status=$out
    [[ $status == 200 ]] || die "smoke $1 $2: HTTP $status: $(head -c 300 "$TMP/smoke.out")"
    if [[ $2 == stream ]]; then
        if [[ $(grep -c '^data: ' "$TMP/smoke.out") != 21 ]] || ! grep -q '^data: \[DONE\]' "$TMP/smoke.out"; then
            die "smoke $1 $2: expected 20 chunks and [DONE], got: $(head -c 300 "$TMP/smoke.out")"
        fi
    else
        cmp -s "$TMP/smoke.out" <(printf '%s' "$JSON_BODY") \
            || die "smoke $1 $2: body differs: $(head -c 300 "$TMP/smoke.out")"
    fi
}

TARGETS="direct llmgw passthrough"
MODES="json stream"
for t in $TARGETS; do for m in $MODES; do smoke "$t" "$m"; done; done
log "smoke checks passed (200, full bodies) for every target and mode"

# wrk_run TARGET MODE CONC SECONDS -> "rps p50_ms p99_ms errors"
wrk_run() {
    local threads=2 out line
    (($3 < 2)) && threads=1
    out=$(BENCH_MODEL=$(model_for "$2") BENCH_STREAM=$(stream_for "$2") BENCH_KEY=$KEY \
        wrk -t"$threads" -c"$3" -d"$4"s -s bench/chat.lua "$(url_for "$1" "$2")" 2>&1) \
        || die "wrk failed for $1 $2 c$3: $out"
    line=$(grep '^RESULT ' <<<"$out") || die "no RESULT line from wrk: $out"
    [[ $line =~ rps=([^ ]+)\ p50_ms=([^ ]+)\ p99_ms=([^ ]+)\ requests=[0-9]+\ errors=([0-9]+) ]] \
        || die "cannot parse: $line"
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]} ${BASH_REMATCH[4]}"
}

RESULTS=$TMP/results.txt
: >"$RESULTS"
max_conc=$(tr ' ' '\n' <<<"$CONCS" | sort -n | tail -n 1)
n_runs=$(($(wc -w <<<"$TARGETS") * $(wc -w <<<"$MODES") * $(wc -w <<<"$CONCS")))
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }' \
    && log "warning: load average is $load before the runs; other work on this machine skews the numbers"
log "measuring: $n_runs runs of ${DURATION}s (+ ${WARMUP}s warm-up per target and mode)"
for m in $MODES; do
    for t in $TARGETS; do
        wrk_run "$t" "$m" "$max_conc" "$WARMUP" >/dev/null
        for c in $CONCS; do
            r=$(wrk_run "$t" "$m" "$c" "$DURATION")
            log "$(printf '%-11s %-6s c%-3s -> rps p50 p99 errors: %s' "$t" "$m" "$c" "$r")"
            echo "$t $m $c $r" >>"$RESULTS"
        done
    done
done

# --- 4. report -------------------------------------------------------------------------------

kill -0 "$GW_PID" 2>/dev/null || die "llmgw died during the run"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src 2>/dev/null || commit="$commit (src/ modified)"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || true)
echo
"$PY" bench/report.py "$RESULTS" --out bench/results/latest.md \
    --header "# llmgw bench, $(date -u '+%Y-%m-%d %H:%M UTC')" \
    --header "" \
    --header "commit $commit; ${DURATION}s per run; $(nproc) cores${cpu:+ ($cpu)}; load average $load; wrk -t1 -c1 and -t2 -cN; fake upstream: nginx $(nginx -v 2>&1 | sed 's|.*/||')"

append_warnings "$TMP/llmgw.log" bench/results/latest.md
log "written bench/results/latest.md"
