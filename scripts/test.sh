#!/usr/bin/env bash
# The whole test suite: lint, types, layer contract, and pytest (unit, engine, end to end with
# the real llama-server on the demo model, the store on a real PostgreSQL, the console in a real
# Chromium, the shared limits on a real Redis, the docs site built strict and read in Chromium,
# the real OpenID provider the console's single sign-on is to be tested against, and MCP's own
# server-everything and conformance suite).
# Extra arguments go to pytest. It is safe in the shell where up.sh runs: the tests never read or
# write the install that LLMGW_DATA_DIR, LLMGW_ADMIN_KEY, HOME or a ctl.toml name
# (tests/support/isolation.py), only the tools' LLMGW_* variables set below reach them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
ensure_venv demo,dev
ensure_postgres
ensure_chromium
ensure_redis
ensure_mermaid
ensure_test_npm

echo "== ruff";         .venv/bin/ruff check src tests bench
echo "== mypy";         .venv/bin/mypy
echo "== lint-imports"; .venv/bin/lint-imports --no-cache
echo "== pytest"
set +e
.venv/bin/pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
