#!/usr/bin/env bash
# HA figures: failover time over 10 runs per lease timing, and requests/s through 2 servers vs 1.
# See bench/README.md. Extra arguments go to bench/ha.py (--runs, --duration, --conns, …).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
export PATH="$PATH:/usr/sbin:/sbin"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    echo "[bench] installing ${missing[*]} with apt-get" >&2
    $sudo apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >&2
fi
ensure_venv dev
ensure_postgres
exec .venv/bin/python bench/ha.py "$@"
