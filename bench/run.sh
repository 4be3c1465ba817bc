#!/usr/bin/env bash
# Measure what llmgw adds to a request: the same load against a fake upstream (nginx) directly,
# through llmgw, through a bare aiohttp pass-through proxy, and through the raw floor (a bare
# asyncio + httptools server with llmgw's upstream client), and optionally through LiteLLM's proxy
# (the anchor); and what llmgw adds in the other dialects (Anthropic Messages natively and
# translated to chat completions, OpenAI Responses over chat completions) next to chat
# completions. See bench/README.md.
#
#   bash bench/run.sh
#
# Env knobs: BENCH_DURATION (s per measured run, default 10), BENCH_WARMUP (s, default 2),
# BENCH_CONCS (default "1 32"), BENCH_APIS (default "chat messages messages_via_chat
# responses_via_chat"; chat is always measured, it is the yardstick), BENCH_MODES (default
# "json stream"), BENCH_ROUNDS (default 1; each cell's median over the rounds is reported),
# BENCH_TELEMETRY=1 (llmgw exports a trace of every request over OTLP/HTTP to a local sink),
# BENCH_TELEMETRY_RATIO (with BENCH_TELEMETRY=1: the share of requests traced, default 1.0),
# BENCH_REDIS=1 (also llmgw, 1 and 2 workers, with its limits in a Redis of the run's own, side
# by side with the in-memory rows), BENCH_KEEP_TMP=1 (keep the temp dir with
# the logs), BENCH_ROUTE (default 1: also chat
# completions through a two-target priority route, and the failover measurement of
# bench/failover.py; 0 leaves both out), BENCH_CACHE=1 (also chat completions with the response
# cache on: every request a hit, and every request a miss that is kept, `Cache-Control:
# no-cache`; side by side with the rows above and the pass-through floor), BENCH_PIN_C1=1 (runs at concurrency 1 with wrk, the
# fake upstream and the proxy under test all on one core; see bench/README.md), BENCH_LITELLM=1
# (also chat completions through LiteLLM's proxy with 1 worker, the anchor, installed at
# BENCH_LITELLM_VERSION into a venv of its own, BENCH_LITELLM_VENV, default bench/.litellm-venv).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION=${BENCH_DURATION:-10}
WARMUP=${BENCH_WARMUP:-2}
CONCS=${BENCH_CONCS:-"1 32"}
APIS=${BENCH_APIS:-"chat messages messages_via_chat responses_via_chat"}
ROUTE=${BENCH_ROUTE:-1}
CACHE=${BENCH_CACHE:-0}
PIN_C1=${BENCH_PIN_C1:-0}
LITELLM=${BENCH_LITELLM:-0}
# The newest release whose proxy extra installs from PyPI with Python 3.11 when this was written
# (1.108.8 and later pin litellm-enterprise or litellm-proxy-extras releases that are not there).
LITELLM_VERSION=${BENCH_LITELLM_VERSION:-1.108.7}
LITELLM_VENV=${BENCH_LITELLM_VENV:-bench/.litellm-venv}
export PATH="$PATH:/usr/sbin:/sbin"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
for a in $APIS; do
    case $a in chat | messages | messages_via_chat | responses_via_chat) ;; *) die "unknown api in BENCH_APIS: $a" ;; esac
done
[[ $PIN_C1 != 1 ]] || command -v taskset >/dev/null || die "BENCH_PIN_C1=1 needs taskset (util-linux)"

# --- 1. tools -------------------------------------------------------------------------------

ensure_load_tools
if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv and installing llmgw"
    python3 -m venv .venv
    .venv/bin/pip install -q -e . >&2
fi
PY=$PWD/.venv/bin/python
LLMGW=$PWD/.venv/bin/llmgw
# LiteLLM's proxy in a venv of its own (its dependencies must not meet llmgw's), installed once
# and again when BENCH_LITELLM_VERSION changes.
if [[ $LITELLM == 1 ]]; then
    LITELLM_PY=$LITELLM_VENV/bin/python
    installed=$("$LITELLM_PY" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || true)
    if [[ $installed != "$LITELLM_VERSION" ]]; then
        log "installing litellm[proxy]==$LITELLM_VERSION into $LITELLM_VENV"
        [[ -x $LITELLM_PY ]] || python3 -m venv "$LITELLM_VENV"
        "$LITELLM_PY" -m pip install -q "litellm[proxy]==$LITELLM_VERSION" >&2 \
            || die "pip install litellm[proxy]==$LITELLM_VERSION failed"
    fi
    LITELLM_BIN=$(cd "$LITELLM_VENV" && pwd)/bin/litellm
    [[ -x $LITELLM_BIN ]] || die "no litellm in $LITELLM_VENV"
fi

# --- 2. processes: everything lives in a temp dir and dies with this script ------------------

# The code measured is the code the servers start with; the record names it, whatever is
# committed or edited while the run goes on.
START_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
START_SRC_MODIFIED=$(git diff --quiet HEAD -- src 2>/dev/null && echo false || echo true)

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

read -r NGINX_PORT GW_PORT PT_PORT GW2_PORT PT2_PORT SINK_PORT PTR_PORT NGXP_PORT GWR_PORT GW2R_PORT LL_PORT < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(11)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

# The fake upstream. nginx refuses POST to static files, so the bodies are `return`ed from one
# location per API and mode; the path, not the request body, decides JSON or SSE. Chat
# completions and Messages carry the same text: the whole answer's, or 18 deltas in a stream.
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
    # The usage chunk an upstream sends when asked (stream_options.include_usage, which llmgw's
    # translations ask for); OpenAI and llama-server send it after the last choice.
    printf 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":%s,"model":"fake","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":20,"total_tokens":29}}\n\n' "$CREATED"
    printf 'data: [DONE]\n\n'
)$'\n\n' # $(...) strips trailing newlines; put the final blank line back
# nginx single-quoted strings: escape backslashes and single quotes; `$` would be a variable.
nginx_quote() { local s=${1//\\/\\\\}; s=${s//\'/\\\'}; printf "'%s'" "$s"; }
# Anthropic's Messages answer, in the shapes llama-server gives: the whole message, and the
# stream of message_start, a text block's start, deltas and stop, message_delta (stop reason and
# output tokens), message_stop.
ANSWER_TEXT="Hello! This is a fixed answer from the benchmark upstream."
STREAM_TEXT=$(for i in $(seq 2 19); do printf 'tok%s ' "$i"; done)
MSG_JSON_BODY='{"id":"msg_bench","type":"message","role":"assistant","content":[{"type":"text","text":"'$ANSWER_TEXT'"}],"model":"fake","stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":20}}'
msg_event() { printf 'event: %s\ndata: %s\n\n' "$1" "$2"; }
MSG_SSE_BODY=$(
    msg_event message_start '{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","content":[],"model":"fake","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":0}}}'
    msg_event content_block_start '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
    for i in $(seq 2 19); do
        msg_event content_block_delta '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok'"$i"' "}}'
    done
    msg_event content_block_stop '{"type":"content_block_stop","index":0}'
    msg_event message_delta '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":20}}'
    msg_event message_stop '{"type":"message_stop"}'
)$'\n\n'
[[ $JSON_BODY$SSE_BODY$MSG_JSON_BODY$MSG_SSE_BODY != *'$'* ]] || die "fake bodies must not contain \$"

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
        location = /json/v1/messages {
            default_type application/json;
            return 200 $(nginx_quote "$MSG_JSON_BODY");
        }
        location = /sse/v1/messages {
            default_type text/event-stream;
            add_header Cache-Control no-cache;
            return 200 $(nginx_quote "$MSG_SSE_BODY");
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
TELEMETRY=${BENCH_TELEMETRY:-0}
if [[ $TELEMETRY == 1 ]]; then
    # Every request traced (sample_ratio 1) and exported as a collector would receive it.
    "$PY" bench/otlp_sink.py --port "$SINK_PORT" --count-file "$TMP/spans" >"$TMP/otlp-sink.log" 2>&1 &
    PIDS+=($!)
    wait_for "the OTLP sink" 15 "$!" test -s "$TMP/spans"
    sink=http://127.0.0.1:$SINK_PORT
    if grep -q '^otlp_endpoint' "$LLMGW_DATA_DIR/config.toml"; then
        sed -i "s|^otlp_endpoint = .*|otlp_endpoint = \"$sink\"|" "$LLMGW_DATA_DIR/config.toml"
    else
        printf '[telemetry]\notlp_endpoint = "%s"\n' "$sink" >>"$LLMGW_DATA_DIR/config.toml"
    fi
    RATIO=${BENCH_TELEMETRY_RATIO:-1.0}
    sed -i "s|^sample_ratio = .*|sample_ratio = $RATIO|" "$LLMGW_DATA_DIR/config.toml"
    grep -q "^sample_ratio = $RATIO\$" "$LLMGW_DATA_DIR/config.toml" || die "could not set sample_ratio"
    log "telemetry on: traces of $RATIO of the requests to the OTLP sink on :$SINK_PORT"
fi
"$LLMGW" server run --port "$GW_PORT" --workers 1 --log-level warning --log-format text >"$TMP/llmgw.log" 2>&1 &
PIDS+=($!)
GW_PID=$!
wait_for "llmgw /health" 30 "$GW_PID" curl -fsS "http://127.0.0.1:$GW_PORT/health"
# fake-json and fake-sse speak chat completions (--api openai): llmgw translates Messages and
# Responses to chat for them. fake-msg-json and fake-msg-sse speak Messages (--api anthropic), so
# a Messages request goes through natively, as to a llama-server.
for m in json sse; do
    LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl model add "fake-$m" \
        --base-url "http://127.0.0.1:$NGINX_PORT/$m/v1" >>"$TMP/ctl.log" 2>&1 || die "ctl model add fake-$m failed"
    [[ " $APIS " == *" messages "* ]] || continue  # (so BENCH_APIS=chat also runs an older llmgw)
    LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl model add "fake-msg-$m" --api anthropic \
        --base-url "http://127.0.0.1:$NGINX_PORT/$m/v1" >>"$TMP/ctl.log" 2>&1 || die "ctl model add fake-msg-$m failed"
done
# fake-json-c and fake-sse-c: the same upstreams with the response cache on (BENCH_CACHE=1).
if [[ $CACHE == 1 ]]; then
    for m in json sse; do
        LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl model add "fake-$m-c" \
            --base-url "http://127.0.0.1:$NGINX_PORT/$m/v1" >>"$TMP/ctl.log" 2>&1 || die "ctl model add fake-$m-c failed"
        LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl model cache "fake-$m-c" \
            --cache exact --cache-ttl 1d >>"$TMP/ctl.log" 2>&1 || die "ctl model cache fake-$m-c failed"
    done
fi
# route-json and route-sse: priority routes whose first target is fake-json (fake-sse) and whose
# fallback is a second model on the same upstream; only the first ever answers here.
if [[ $ROUTE == 1 ]]; then
    for m in json sse; do
        LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl model add "fake-$m-b" \
            --base-url "http://127.0.0.1:$NGINX_PORT/$m/v1" >>"$TMP/ctl.log" 2>&1 || die "ctl model add fake-$m-b failed"
        LLMGW_URL=http://127.0.0.1:$GW_PORT LLMGW_ADMIN_KEY=$KEY "$LLMGW" ctl route add "route-$m" \
            --to "fake-$m,fake-$m-b" >>"$TMP/ctl.log" 2>&1 || die "ctl route add route-$m failed"
    done
fi
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
    [[ $out == *'"fake-json"'* && $out == *'"fake-sse"'* ]] || return 1
    [[ " $APIS " != *" messages "* || ($out == *'"fake-msg-json"'* && $out == *'"fake-msg-sse"'*) ]] || return 1
    [[ $CACHE != 1 || ($out == *'"fake-json-c"'* && $out == *'"fake-sse-c"'*) ]] || return 1
    [[ $ROUTE != 1 || ($out == *'"route-json"'* && $out == *'"route-sse"'*) ]]
}
wait_for "llmgw routing the fake models" 15 "$GW_PID" models_listed

# The same install served by 2 workers (`server run --workers 2`), on a port of its own: a copy
# of the data dir (taken while the first server is stopped), so both are ready before the first
# measurement and share nothing. Each waits idle while the others are measured.
kill -TERM "$GW_PID" && wait "$GW_PID" || true
cp -a "$TMP/llmgw" "$TMP/llmgw2"
REDIS=${BENCH_REDIS:-0}
[[ $REDIS != 1 ]] || for d in llmgw-r llmgw2-r; do cp -a "$TMP/llmgw" "$TMP/$d"; done
"$LLMGW" server run --port "$GW_PORT" --workers 1 --log-level warning --log-format text >>"$TMP/llmgw.log" 2>&1 &
PIDS+=($!)
GW_PID=$!
wait_for "llmgw routing the fake models" 30 "$GW_PID" models_listed
log "llmgw (pid $GW_PID, 1 worker) on :$GW_PORT"
LLMGW_DATA_DIR=$TMP/llmgw2 "$LLMGW" server run --port "$GW2_PORT" --workers 2 --log-level warning \
    --log-format text >"$TMP/llmgw2.log" 2>&1 &
PIDS+=($!)
GW2_PID=$!
wait_for "llmgw (2 workers) /health" 30 "$GW2_PID" curl -fsS "http://127.0.0.1:$GW2_PORT/health"
two_workers_answer() { # both processes answer: two request-id prefixes over new connections
    local i ids=""
    for ((i = 0; i < 12; i++)); do
        ids+=$(curl -fsS -o /dev/null -D - -H "Authorization: Bearer $KEY" "http://127.0.0.1:$GW2_PORT/v1/models" \
            | tr -d '\r' | sed -n 's/^[Xx]-[Rr]equest-[Ii]d: \(.*\)-[0-9a-f]*$/\1/p')$'\n'
    done
    (($(sort -u <<<"$ids" | grep -c .) >= 2))
}
wait_for "llmgw's second worker" 30 "$GW2_PID" two_workers_answer
log "llmgw (pid $GW2_PID, 2 workers) on :$GW2_PORT"

# BENCH_REDIS=1: the same two installs again (1 and 2 workers), counting their limits in a Redis
# of the run's own (`[limits] redis_url`): every request's admission is a round trip to it. Their
# rows run right after the in-memory ones, so what shared admission costs is read side by side.
if [[ $REDIS == 1 ]]; then
    command -v redis-server >/dev/null || die "BENCH_REDIS=1 needs redis-server (apt-get install redis-server)"
    REDIS_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
    PIDS+=($!)
    wait_for "redis-server" 10 "$!" bash -c "exec 3<>/dev/tcp/127.0.0.1/$REDIS_PORT"
    for d in llmgw-r llmgw2-r; do
        sed -i "s|^redis_url = .*|redis_url = \"redis://127.0.0.1:$REDIS_PORT/0\"|" "$TMP/$d/config.toml"
        grep -q "^redis_url = \"redis://" "$TMP/$d/config.toml" || die "could not set redis_url"
    done
    LLMGW_DATA_DIR=$TMP/llmgw-r "$LLMGW" server run --port "$GWR_PORT" --workers 1 --log-level warning \
        --log-format text >"$TMP/llmgw-r.log" 2>&1 &
    PIDS+=($!)
    GWR_PID=$!
    LLMGW_DATA_DIR=$TMP/llmgw2-r "$LLMGW" server run --port "$GW2R_PORT" --workers 2 --log-level warning \
        --log-format text >"$TMP/llmgw2-r.log" 2>&1 &
    PIDS+=($!)
    GW2R_PID=$!
    GW_PORT=$GWR_PORT wait_for "llmgw with Redis" 30 "$GWR_PID" models_listed
    GW2_PORT=$GW2R_PORT wait_for "llmgw with Redis (2 workers)" 30 "$GW2R_PID" two_workers_answer
    log "llmgw with its limits in Redis on :$REDIS_PORT: pid $GWR_PID (1 worker) on :$GWR_PORT, pid $GW2R_PID (2 workers) on :$GW2R_PORT"
fi

# The floor.
"$PY" bench/passthrough.py --port "$PT_PORT" --upstream "http://127.0.0.1:$NGINX_PORT" >"$TMP/passthrough.log" 2>&1 &
PIDS+=($!)
PT_PID=$!
wait_for "passthrough" 15 "$PT_PID" curl -fsS -X POST -d '{}' "http://127.0.0.1:$PT_PORT/json/v1/chat/completions"
log "passthrough (pid $PT_PID) on :$PT_PORT"
# The floor for 2 workers: the same pass-through in 2 processes sharing the port (SO_REUSEPORT).
"$PY" bench/passthrough.py --port "$PT2_PORT" --processes 2 --upstream "http://127.0.0.1:$NGINX_PORT" >"$TMP/passthrough2.log" 2>&1 &
PIDS+=($!)
PT2_PID=$!
wait_for "passthrough (2 processes)" 15 "$PT2_PID" curl -fsS -X POST -d '{}' "http://127.0.0.1:$PT2_PORT/json/v1/chat/completions"
log "passthrough (pid $PT2_PID, 2 processes) on :$PT2_PORT"
# What the HTTP server costs: the same pass-through on a bare asyncio + httptools server.
"$PY" bench/passthrough.py --port "$PTR_PORT" --raw --upstream "http://127.0.0.1:$NGINX_PORT" >"$TMP/passthrough-raw.log" 2>&1 &
PIDS+=($!)
PTR_PID=$!
wait_for "raw passthrough" 15 "$PTR_PID" curl -fsS -X POST -d '{}' "http://127.0.0.1:$PTR_PORT/json/v1/chat/completions"
log "raw passthrough (pid $PTR_PID) on :$PTR_PORT"
# What any proxy's hop costs on this machine: nginx itself as a reverse proxy (one worker, its own
# process, connections to the upstream kept alive, answers relayed as they come). What the extra
# hop's wake-ups and loopback writes take moves with the machine's load; this row shows it beside
# llmgw's in every run.
mkdir -p "$TMP/nginx-proxy"
cat >"$TMP/nginx-proxy/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx-proxy/nginx.pid;
error_log $TMP/nginx-proxy.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $TMP/nginx-proxy/body;
    proxy_temp_path $TMP/nginx-proxy/proxy;
    fastcgi_temp_path $TMP/nginx-proxy/fastcgi;
    uwsgi_temp_path $TMP/nginx-proxy/uwsgi;
    scgi_temp_path $TMP/nginx-proxy/scgi;
    upstream fake { server 127.0.0.1:$NGINX_PORT; keepalive 64; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:$NGXP_PORT;
        location / {
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
nginx -t -q -p "$TMP/nginx-proxy" -e "$TMP/nginx-proxy.log" -c "$TMP/nginx-proxy/nginx.conf" \
    || die "bad nginx proxy config"
nginx -p "$TMP/nginx-proxy" -e "$TMP/nginx-proxy.log" -c "$TMP/nginx-proxy/nginx.conf" \
    >"$TMP/nginx-proxy-stdout.log" 2>&1 &
PIDS+=($!)
NGXP_PID=$!
wait_for "nginx proxy" 10 "$NGXP_PID" curl -fsS -X POST -d '{}' "http://127.0.0.1:$NGXP_PORT/json/v1/chat/completions"
log "nginx proxy (pid $NGXP_PID) on :$NGXP_PORT"
# BENCH_LITELLM=1: the anchor, LiteLLM's proxy as its docs set it up for production and for their
# own benchmarks, kept to what a proxy needs: one uvicorn worker (as llmgw's 1-worker row), the two
# fake models as OpenAI-compatible deployments (`openai/` provider, api_base the fake upstream, a
# dummy api_key; a model name its price list knows, as a real deployment's would be, so pricing
# each answer takes its usual path rather than the search it makes for an unpriced model), a
# master key and no database (so no virtual keys, spend logs or budgets), no
# callbacks, cache, retries or telemetry, logging at ERROR (no access log), the model cost map
# bundled with the package (no fetch at start). Clients send the same bearer key as to llmgw: it
# is LiteLLM's master key here, so the requests are byte for byte llmgw's.
if [[ $LITELLM == 1 ]]; then
    mkdir -p "$TMP/litellm"
    cat >"$TMP/litellm/config.yaml" <<EOF
model_list:
  - model_name: fake-json
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: http://127.0.0.1:$NGINX_PORT/json/v1
      api_key: sk-bench-dummy
  - model_name: fake-sse
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: http://127.0.0.1:$NGINX_PORT/sse/v1
      api_key: sk-bench-dummy
litellm_settings:
  telemetry: false
  callbacks: []
  success_callback: []
  failure_callback: []
  cache: false
  num_retries: 0
  request_timeout: 30
  set_verbose: false
general_settings:
  master_key: $KEY
  disable_spend_logs: true
  disable_error_logs: true
EOF
    # Started in the config's directory: LiteLLM reads a .env from where it starts unless
    # LITELLM_MODE is PRODUCTION, and nothing of this repo's environment should reach it.
    (cd "$TMP/litellm" && exec env -u DATABASE_URL -u REDIS_HOST -u REDIS_URL LITELLM_LOG=ERROR \
        LITELLM_MODE=PRODUCTION LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY_DISABLED=true \
        "$LITELLM_BIN" --config "$TMP/litellm/config.yaml" --host 127.0.0.1 --port "$LL_PORT" \
        --num_workers 1) >"$TMP/litellm.log" 2>&1 &
    PIDS+=($!)
    LL_PID=$!
    wait_for "LiteLLM proxy" 120 "$LL_PID" curl -fsS "http://127.0.0.1:$LL_PORT/health/liveliness"
    log "LiteLLM proxy $LITELLM_VERSION (pid $LL_PID, 1 worker) on :$LL_PORT"
fi

# --- 3. load ---------------------------------------------------------------------------------

# A cell is API:TARGET. API names what the client sends and what the upstream answers: chat
# (chat completions both ways), messages (Messages both ways), messages_via_chat and
# responses_via_chat (the client's dialect, translated by llmgw to chat completions). Direct and
# passthrough rows exist where the upstream is asked in the client's own dialect.
client_api() { case $1 in chat | route | cache_hit | cache_miss) echo chat ;; messages | messages_via_chat) echo messages ;; *) echo responses ;; esac; }
upstream_api() { [[ $1 == messages ]] && echo messages || echo chat; }
url_for() { # API TARGET MODE
    local prefix=json path
    [[ $3 == stream ]] && prefix=sse
    case $(upstream_api "$1") in chat) path=chat/completions ;; messages) path=messages ;; esac
    local gw=$GW_PORT
    case $2 in llmgw-2w) gw=$GW2_PORT ;; llmgw-redis) gw=$GWR_PORT ;; llmgw-2w-redis) gw=$GW2R_PORT ;; esac
    case $2 in
        direct) echo "http://127.0.0.1:$NGINX_PORT/$prefix/v1/$path" ;;
        passthrough) echo "http://127.0.0.1:$PT_PORT/$prefix/v1/$path" ;;
        passthrough-2p) echo "http://127.0.0.1:$PT2_PORT/$prefix/v1/$path" ;;
        passthrough-raw) echo "http://127.0.0.1:$PTR_PORT/$prefix/v1/$path" ;;
        proxy-nginx) echo "http://127.0.0.1:$NGXP_PORT/$prefix/v1/$path" ;;
        litellm) echo "http://127.0.0.1:$LL_PORT/v1/chat/completions" ;;
        llmgw*)
            case $(client_api "$1") in
                chat) echo "http://127.0.0.1:$gw/v1/chat/completions" ;;
                messages) echo "http://127.0.0.1:$gw/v1/messages" ;;
                responses) echo "http://127.0.0.1:$gw/v1/responses" ;;
            esac ;;
    esac
}
model_for() { # API MODE
    local m=json
    [[ $2 == stream ]] && m=sse
    case $1 in messages) echo "fake-msg-$m" ;; route) echo "route-$m" ;; cache_*) echo "fake-$m-c" ;;
        *) echo "fake-$m" ;; esac
}
stream_for() { [[ $1 == stream ]] && echo true || echo false; }
body_for() { # API MODE: what bench/chat.lua sends, for the smoke check
    local model stream
    model=$(model_for "$1" "$2")
    stream=$(stream_for "$2")
    case $(client_api "$1") in
        chat) if [[ $1 == cache_* ]]; then
                echo '{"model":"'"$model"'","messages":[{"role":"user","content":"hello"}],"stream":'"$stream"',"temperature":0}'
            else
                echo '{"model":"'"$model"'","messages":[{"role":"user","content":"hello"}],"stream":'"$stream"'}'
            fi ;;
        messages) echo '{"model":"'"$model"'","max_tokens":64,"messages":[{"role":"user","content":"hello"}],"stream":'"$stream"'}' ;;
        responses) echo '{"model":"'"$model"'","input":"hello","stream":'"$stream"'}' ;;
    esac
}

# One request per cell and mode before any load: status 200 and the whole answer, in the
# client's dialect (a native answer byte for byte; a translated one with all its text and its end).
smoke() { # API TARGET MODE
    local status api
    api=$(client_api "$1")
    status=$(curl -sS -o "$TMP/smoke.out" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
        -H 'anthropic-version: 2023-06-01' -H 'Content-Type: application/json' -d "$(body_for "$1" "$3")" \
        "$(url_for "$1" "$2" "$3")") || die "smoke $1 $2 $3: curl failed"
    [[ $status == 200 ]] || die "smoke $1 $2 $3: HTTP $status: $(head -c 300 "$TMP/smoke.out")"
    # LiteLLM writes answers of its own (its JSON, no usage chunk unless the client asks for it):
    # check_answer.py below checks their text and end, as for llmgw's translations.
    [[ $2 == litellm ]] || case $1:$3 in
        chat:stream | route:stream)
            if [[ $(grep -c '^data: ' "$TMP/smoke.out") != 22 ]] || ! grep -q '^data: \[DONE\]' "$TMP/smoke.out"; then
                die "smoke $1 $2 $3: expected 20 chunks, a usage chunk and [DONE], got: $(head -c 300 "$TMP/smoke.out")"
            fi ;;
        chat:json | route:json) cmp -s "$TMP/smoke.out" <(printf '%s' "$JSON_BODY") \
            || die "smoke $1 $2 $3: body differs: $(head -c 300 "$TMP/smoke.out")" ;;
        messages:json) cmp -s "$TMP/smoke.out" <(printf '%s' "$MSG_JSON_BODY") \
            || die "smoke $1 $2 $3: body differs: $(head -c 300 "$TMP/smoke.out")" ;;
    esac
    local text=$ANSWER_TEXT
    [[ $3 == stream ]] && text=$STREAM_TEXT
    "$PY" bench/check_answer.py "$api" "$3" "$TMP/smoke.out" "$text" \
        || die "smoke $1 $2 $3: $(head -c 300 "$TMP/smoke.out")"
}

# The cells, ordered so that llmgw's rows of every dialect run one after the other.
# Chat completions also runs through 2 workers and the 2-process pass-through.
CELLS="chat:direct"
[[ " $APIS " == *" messages "* ]] && CELLS+=" messages:direct"
CELLS+=" chat:llmgw"
[[ $REDIS == 1 ]] && CELLS+=" chat:llmgw-redis"
[[ $ROUTE == 1 ]] && CELLS+=" route:llmgw"
[[ $CACHE == 1 ]] && CELLS+=" cache_hit:llmgw cache_miss:llmgw"
for a in $APIS; do [[ $a == chat ]] || CELLS+=" $a:llmgw"; done
CELLS+=" chat:passthrough"
[[ " $APIS " == *" messages "* ]] && CELLS+=" messages:passthrough"
[[ $LITELLM == 1 ]] && CELLS+=" chat:litellm"
CELLS+=" chat:llmgw-2w"
[[ $REDIS == 1 ]] && CELLS+=" chat:llmgw-2w-redis"
CELLS+=" chat:passthrough-2p chat:passthrough-raw chat:proxy-nginx"
MODES=${BENCH_MODES:-"json stream"}
ROUNDS=${BENCH_ROUNDS:-1}
for cell in $CELLS; do for m in $MODES; do smoke "${cell%%:*}" "${cell#*:}" "$m"; done; done
log "smoke checks passed (200, full answers in the client's dialect) for every cell and mode"

# cpu_ticks PID: user + system CPU time the process and its children (a server's workers) have
# used, in clock ticks (all their threads).
cpu_ticks() {
    local pid total=0 t
    for pid in "$1" $(pgrep -P "$1" || true); do
        t=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }') || t=0
        total=$((total + ${t:-0}))
    done
    echo "$total"
}
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# pin_to CPUS PID...: every thread of each process and of its children on CPUS.
pin_to() {
    local cpus=$1 pid
    shift
    for pid in "$@" $(for p in "$@"; do pgrep -P "$p" || true; done); do
        taskset -a -p -c "$cpus" "$pid" >/dev/null 2>&1 || true
    done
}
ALL_CPUS=0-$(($(nproc) - 1))

# wrk_run API TARGET MODE CONC SECONDS -> "rps p50_ms p99_ms errors cpu_us"
# cpu_us: CPU the proxy under test (llmgw or the passthrough) used per request during the run,
# in microseconds; "-" for direct. Unlike rps it hardly depends on what else the machine runs.
wrk_run() {
    local threads=2 out line pid="" before=0 cpu=-
    (($4 < 2)) && threads=1
    case $2 in
        llmgw) pid=$GW_PID ;; llmgw-2w) pid=$GW2_PID ;; llmgw-redis) pid=$GWR_PID ;; llmgw-2w-redis) pid=$GW2R_PID ;;
        passthrough) pid=$PT_PID ;; passthrough-2p) pid=$PT2_PID ;; passthrough-raw) pid=$PTR_PID ;;
        proxy-nginx) pid=$NGXP_PID ;; litellm) pid=$LL_PID ;;
    esac
    [[ -n $pid ]] && before=$(cpu_ticks "$pid")
    local pin=()
    if [[ $PIN_C1 == 1 ]] && (($4 == 1)); then
        # One request at a time wakes each process of the chain in turn: on one core every
        # wake-up is local, so what is measured is the code, not where the scheduler put it.
        pin_to 0 "$NGINX_PID" ${pid:+"$pid"}
        pin=(taskset -c 0)
    fi
    # --timeout: wrk's default of 2 s is below LiteLLM's p99 with streams at concurrency 32; a
    # request cut off there would count as an error and leave the latency figures.
    out=$(BENCH_API=$(client_api "$1") BENCH_MODEL=$(model_for "$1" "$3") BENCH_STREAM=$(stream_for "$3") \
        BENCH_CACHE=$([[ $1 == cache_* ]] && echo "${1#cache_}") \
        BENCH_KEY=$KEY "${pin[@]}" wrk -t"$threads" -c"$4" -d"$5"s --timeout 10s -s bench/chat.lua \
        "$(url_for "$1" "$2" "$3")" 2>&1) \
        || die "wrk failed for $1 $2 $3 c$4: $out"
    ((${#pin[@]} == 0)) || pin_to "$ALL_CPUS" "$NGINX_PID" ${pid:+"$pid"}
    line=$(grep '^RESULT ' <<<"$out") || die "no RESULT line from wrk: $out"
    [[ $line =~ rps=([^ ]+)\ p50_ms=([^ ]+)\ p99_ms=([^ ]+)\ requests=([0-9]+)\ errors=([0-9]+) ]] \
        || die "cannot parse: $line"
    if [[ -n $pid ]] && ((BASH_REMATCH[4] > 0)); then
        cpu=$((($(cpu_ticks "$pid") - before) * TICK_US / BASH_REMATCH[4]))
    fi
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]} ${BASH_REMATCH[5]} $cpu"
}

RESULTS=$TMP/results.txt
: >"$RESULTS"
max_conc=$(tr ' ' '\n' <<<"$CONCS" | sort -n | tail -n 1)
n_runs=$(($(wc -w <<<"$CELLS") * $(wc -w <<<"$MODES") * $(wc -w <<<"$CONCS")))
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }' \
    && log "warning: load average is $load before the runs; other work on this machine skews the numbers"
log "measuring: $ROUNDS × $n_runs runs of ${DURATION}s (+ ${WARMUP}s warm-up per cell and mode)"
# Rounds repeat the whole matrix, so a burst of other work on the machine lands in one round's
# figures; the report takes each cell's median over the rounds. Within a mode every cell runs at
# one concurrency before any runs at the next: the rows a goal compares then follow each other,
# and a row at concurrency 1 never comes straight after a saturating one.
for ((round = 1; round <= ROUNDS; round++)); do
    for m in $MODES; do
        if ((round == 1)); then
            for cell in $CELLS; do wrk_run "${cell%%:*}" "${cell#*:}" "$m" "$max_conc" "$WARMUP" >/dev/null; done
        fi
        for c in $CONCS; do
            for cell in $CELLS; do
                a=${cell%%:*} t=${cell#*:}
                r=$(wrk_run "$a" "$t" "$m" "$c" "$DURATION")
                log "$(printf 'round %s %-18s %-11s %-6s c%-3s -> rps p50 p99 errors cpu_us: %s' \
                    "$round" "$a" "$t" "$m" "$c" "$r")"
                echo "$a $t $m $c $r" >>"$RESULTS"
            done
        done
    done
done

# --- 4. report -------------------------------------------------------------------------------

kill -0 "$GW_PID" 2>/dev/null || die "llmgw died during the run"
kill -0 "$GW2_PID" 2>/dev/null || die "llmgw (2 workers) died during the run"
if [[ $REDIS == 1 ]]; then
    kill -0 "$GWR_PID" 2>/dev/null && kill -0 "$GW2R_PID" 2>/dev/null || die "llmgw with Redis died during the run"
fi
[[ $LITELLM != 1 ]] || kill -0 "$LL_PID" 2>/dev/null || die "the LiteLLM proxy died during the run"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src 2>/dev/null || commit="$commit (src/ modified)"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || true)
echo
# The BENCH_* knobs this run was given, for the record's command line.
knobs=$(env | grep -E '^BENCH_[A-Z0-9_]+=' | sort | sed -E "s/^([^=]+)=(.*)$/\1='\2'/" | tr '\n' ' ' || true)
"$PY" bench/report.py "$RESULTS" --out bench/results/latest.md \
    --json bench/results/request_path.json \
    --meta "load_before=$load" --meta "command=${knobs}bash bench/run.sh" --meta "duration_s=$DURATION" \
    --meta "commit=$START_COMMIT" --meta "src_modified=$START_SRC_MODIFIED" \
    --meta "warmup_s=$WARMUP" --meta "rounds=$ROUNDS" --meta "telemetry=$([[ $TELEMETRY == 1 ]] && echo true || echo false)" \
    --meta "redis=$([[ $REDIS == 1 ]] && echo true || echo false)" --meta "pin_c1=$([[ $PIN_C1 == 1 ]] && echo true || echo false)" \
    --meta "route=$([[ $ROUTE == 1 ]] && echo true || echo false)" \
    --meta "litellm=$([[ $LITELLM == 1 ]] && echo "$LITELLM_VERSION" || echo false)" \
    --meta "fake_upstream=nginx $(nginx -v 2>&1 | sed 's|.*/||')" --meta "load=wrk -t1 -c1 and -t2 -cN" \
    --header "# llmgw bench, $(date -u '+%Y-%m-%d %H:%M UTC')" \
    --header "" \
    --header "commit $commit; telemetry $([[ $TELEMETRY == 1 ]] && echo "on (sample_ratio $RATIO; $(cat "$TMP/spans" | tr -d '\n') spans exported to a local OTLP sink)" || echo off); ${DURATION}s per run, median of $ROUNDS round(s)$([[ $PIN_C1 == 1 ]] && echo "; concurrency 1 pinned to one core (BENCH_PIN_C1=1)")$([[ $REDIS == 1 ]] && echo "; Redis rows: the same installs with [limits] redis_url, a redis-server of the run's own")$([[ $LITELLM == 1 ]] && echo "; the anchor: LiteLLM proxy $LITELLM_VERSION, 1 worker, master key, no database"); $(nproc) cores${cpu:+ ($cpu)}; load average $load before, $(cut -d' ' -f1 /proc/loadavg) after; wrk -t1 -c1 and -t2 -cN; fake upstream: nginx $(nginx -v 2>&1 | sed 's|.*/||')"

if [[ $ROUTE == 1 ]]; then
    log "failover: a priority route's first target goes down (bench/failover.py)"
    {
        echo
        "$PY" bench/failover.py --url "http://127.0.0.1:$GW_PORT" --admin-key "$ADMIN_KEY" \
            | sed 's/^/- /'
    } | tee -a bench/results/latest.md || die "bench/failover.py failed"
fi

append_warnings "$TMP/llmgw.log" bench/results/latest.md
append_warnings "$TMP/llmgw2.log" bench/results/latest.md
if [[ $LITELLM == 1 ]] && grep -qE 'ERROR|Traceback' "$TMP/litellm.log"; then
    {
        echo
        echo "The LiteLLM proxy logged errors during the run (its last such lines):"
        echo
        grep -E 'ERROR|Traceback' "$TMP/litellm.log" | tail -n 5 | sed 's/^/    /'
    } | tee -a bench/results/latest.md
fi
log "written bench/results/latest.md and bench/results/request_path.json"
