#!/usr/bin/env bash
# HA figures: failover time over 10 runs per lease timing, and requests/s through 2 servers vs 1.
# See bench/README.md. Extra arguments go to bench/ha.py (--runs, --duration, --conns, …).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
# shellcheck source=bench/lib.sh
source bench/lib.sh
export PATH="$PATH:/usr/sbin:/sbin"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

ensure_load_tools
ensure_venv dev
ensure_postgres
exec .venv/bin/python bench/ha.py "$@"
