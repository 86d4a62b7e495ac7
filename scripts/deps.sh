#!/usr/bin/env bash
# The one install step: Debian packages for the build and tests, and the pinned test-only
# Python packages in a git-ignored virtual environment (.venv). Idempotent and quick when
# everything is already there.
#
#   scripts/deps.sh --build   build dependencies only (the Debian packages): what `make build`
#                             and `make train` need; no Python, no PyTorch
#   scripts/deps.sh           build + test dependencies (make test, .ci/run)
#   scripts/deps.sh --bench   also the benchmark's peers: tcmalloc for PyTorch, bpe-qwen (a Rust
#                             Qwen BPE, for the tokenizer benchmark) and torchtitan
#                             (its PyPI release pins a `datasets` that conflicts with the
#                             venv's fsspec, so it goes in without dependencies, plus the few
#                             it needs to import its Qwen3 model)
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=0 BUILD_ONLY=0
case "${1:-}" in
  --bench) BENCH=1 ;;
  --build) BUILD_ONLY=1 ;;
  "") ;;
  *) echo "usage: scripts/deps.sh [--build | --bench]" >&2; exit 2 ;;
esac

DEBS=(build-essential cmake pkg-config python3 python3-venv
      libopenblas-dev libopenblas0-openmp libdnnl-dev libjansson-dev
      libpcre2-dev libutf8proc-dev libopenmpi-dev openmpi-bin)

[ $BUILD_ONLY = 0 ] && DEBS+=(strace) # tokenize_race holds a race's timing open with it
[ $BENCH = 1 ] && DEBS+=(libtcmalloc-minimal4)
missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ $BUILD_ONLY = 1 ] && exit 0 # the Python test references are for make test / make bench

REQ=tests/reference/requirements.txt
STAMP=.venv/.requirements.stamp
PYTHON=${TITAN_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[deps] creating .venv"
  "$PYTHON" -m venv .venv
fi
# pip without its HTTP cache (the cache is a second copy of every wheel, ~3 GiB for torch and
# its CUDA libraries) and with its temporaries beside the venv, not in a /tmp that may be a
# small tmpfs: a CI machine ran out of space in pip's download buffer. The installed venv
# takes 5.7 GiB, and pip keeps every downloaded wheel (~3 GiB) until it ends: ~9 GiB at the
# peak, less what an earlier install left in .venv.
PIP=(.venv/bin/pip install -q --disable-pip-version-check --no-cache-dir)
export TMPDIR="$PWD/.venv/.pip-tmp"
rm -rf "$TMPDIR" # a killed run's leftovers
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
if ! cmp -s "$REQ" "$STAMP" 2>/dev/null; then
  HAVE_KIB=$(du -sk .venv 2>/dev/null | awk '{ print $1 }') || HAVE_KIB=0
  NEED_KIB=$((9 * 1024 * 1024 - ${HAVE_KIB:-0}))
  FREE_KIB=$(df -Pk .venv 2>/dev/null | awk 'NR == 2 && $4 ~ /^[0-9]+$/ { print $4 }') || FREE_KIB=
  if [ -n "$FREE_KIB" ] && [ "$NEED_KIB" -gt 0 ] && [ "$FREE_KIB" -lt "$NEED_KIB" ]; then
    MNT=$(df --output=target .venv 2>/dev/null | tail -n 1) || MNT=?
    echo "[deps] $REQ needs ~9 GiB for .venv at its peak (torch, its CUDA libraries and their" \
      "wheels) in $MNT: $((FREE_KIB / 1024)) MiB are free and .venv holds" \
      "$((${HAVE_KIB:-0} / 1024)) MiB (removing a broken .venv frees that)" >&2
    exit 1
  fi
  echo "[deps] pip install -r $REQ (torch is large: a few minutes on first run)"
  "${PIP[@]}" -r "$REQ"
  cp "$REQ" "$STAMP"
fi

if [ $BENCH = 1 ] && ! .venv/bin/python -c "import torchtitan.models.qwen3" >/dev/null 2>&1; then
  echo "[deps] pip install torchtitan (benchmark peer)"
  "${PIP[@]}" --no-deps torchtitan==0.3.0 \
    spmd_types==0.2.3 tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.6.1 || \
    echo "[deps] torchtitan could not be installed: the benchmark will skip it"
fi
if [ $BENCH = 1 ] && ! .venv/bin/python -c "import bpe_qwen" >/dev/null 2>&1; then
  "${PIP[@]}" --no-deps bpe-qwen==0.1.5 || \
    echo "[deps] bpe-qwen could not be installed: the tokenizer benchmark will skip it"
fi
