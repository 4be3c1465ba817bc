#!/usr/bin/env bash
# On-demand figures: the cold start of the demo model through llmgw against llama-server started
# by hand with the same argv (median of 5 each, and the verdict against the bound: llmgw may add
# at most 15 % or 0.5 s, whichever is larger), and the swap time between two on-demand models
# that do not fit side by side. Written to bench/results/ondemand.md.
#
#   bash bench/ondemand.sh [--runs 5] [--set refresh_interval_s=0.2] [--keep]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost

ensure_venv demo
exec .venv/bin/python bench/ondemand.py "$@"
