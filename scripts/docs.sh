#!/usr/bin/env bash
# The docs site on this machine: `bash scripts/docs.sh` serves it at http://127.0.0.1:8000 with
# live reload; `bash scripts/docs.sh build` writes it to site/. Extra arguments go to mkdocs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
ensure_venv dev noengine
ensure_mermaid
export NO_MKDOCS_2_WARNING=1
if [ "${1:-serve}" = build ]; then
  shift || true
  exec .venv/bin/mkdocs build --strict "$@"
fi
[ "${1:-}" = serve ] && shift
exec .venv/bin/mkdocs serve "$@"
