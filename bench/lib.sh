# shellcheck shell=bash
# Shared by the bench scripts (sourced, not run).

# append_warnings LOG OUT: what llmgw logged at WARNING and above during a run, grouped by
# message and counted, printed and appended to OUT. The server runs with --log-format text.
append_warnings() {
    local problems
    problems=$(grep -E '^[0-9-]+ [0-9:,]+ (WARNING|ERROR|CRITICAL) ' "$1" \
        | sed -E 's/^[0-9-]+ [0-9:,]+ //' | sort | uniq -c | sort -rn | sed -E 's/^ +//' || true)
    if [[ -n $problems ]]; then
        {
            echo
            echo "llmgw logged warnings during the run (count, message):"
            echo
            # shellcheck disable=SC2001 # indent every line
            sed 's/^/    /' <<<"$problems"
        } | tee -a "$2"
    fi
}

# ensure_load_tools: nginx (the fake upstream) and wrk (the load), installed with apt-get when
# they are missing.
ensure_load_tools() {
    local missing=() sudo=""
    command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
    command -v wrk >/dev/null 2>&1 || missing+=(wrk)
    ((${#missing[@]})) || return 0
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    printf '[bench] installing %s with apt-get\n' "${missing[*]}" >&2
    $sudo apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >&2
}
