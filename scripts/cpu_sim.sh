#!/usr/bin/env bash
# Runs a command as titan would behave on a CPU class with fewer features than this one, so a
# change made on one kind of machine can be tested for the others before CI meets them.
#
# titan decides its bf16 engine, default precision, AMX layouts and kernels from the flags line
# of /proc/cpuinfo (ops_cpu_has_flag) and its kernels' ISA copy from cpuid, which TITAN_ISA
# overrides. This script bind-mounts, in a private mount namespace, a copy of /proc/cpuinfo with
# the class's missing flags removed, sets TITAN_ISA to match, and runs the command there.
# Vendor libraries (oneDNN, OpenBLAS, PyTorch) still read cpuid and see the real CPU: what is
# simulated is titan's own choices. Features are removed, except for the class amx, which adds
# AMX's flags to a CPU with AVX512_BF16 and no AMX: titan then chooses as on an AMX machine, and
# in a build configured with -DTITAN_AMX_EMULATE=ON its AMX kernels run on emulated tiles
# (src/ops/cpu/amx_emulate.c; `make test-amx-emulated`); a normal build cannot run them there.
#
# usage: scripts/cpu_sim.sh CLASS COMMAND [ARGS...]     (root: unshare -m, mount --bind)
#   CLASS avx2         no AVX-512, no bf16 units (Zen 3 / Haswell class): avx512* and amx_*
#                      flags removed, TITAN_ISA=default (the x86-64-v3 kernel copies)
#         avx512       AVX-512 without bf16 units (Skylake-X / Cascade Lake class):
#                      avx512_bf16 and amx_* removed
#         avx512_bf16  AVX512_BF16 without AMX (Zen 4 class): amx_* removed
#         amx          AMX-BF16 (Sapphire Rapids class), on a CPU with AVX512_BF16: amx_bf16 and
#                      amx_tile added
# e.g.  scripts/cpu_sim.sh avx2 ctest --test-dir build -j2
#       scripts/cpu_sim.sh avx512 build/titan kernels test embedding
#       scripts/cpu_sim.sh --check      exit 0 if this machine lets it simulate (root, a private
#                                       mount namespace, a bind mount over /proc/cpuinfo), else 1
set -euo pipefail
cls=${1:-}
if [ "$cls" = --check ]; then
  [ "$(id -u)" = 0 ] || exit 1
  unshare -m --propagation private sh -c 'mount --bind /proc/cpuinfo /proc/cpuinfo' 2>/dev/null || exit 1
  exit 0
fi
[ $# -ge 2 ] || { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
shift
case "$cls" in
  avx2) drop='avx512[a-z0-9_]*|amx_[a-z0-9]*' isa=default ;;
  avx512) drop='avx512_bf16|amx_[a-z0-9]*' isa= ;;
  avx512_bf16) drop='amx_[a-z0-9]*' isa= ;;
  amx) drop='amx_[a-z0-9]*' isa= add=' amx_bf16 amx_tile'
    grep -qw avx512_bf16 /proc/cpuinfo || { echo "cpu_sim.sh: amx needs a CPU with AVX512_BF16" >&2; exit 2; } ;;
  *) echo "cpu_sim.sh: unknown class '$cls' (avx2, avx512, avx512_bf16, amx)" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "cpu_sim.sh: needs root (a private mount namespace)" >&2; exit 2; }
info=$(mktemp /tmp/titan_cpuinfo.XXXXXX)
trap 'rm -f "$info"' EXIT
sed -E "/^flags/ { s/ ($drop)\b//g; s/\$/${add:-}/ }" /proc/cpuinfo >"$info"
# the child mounts the copy over /proc/cpuinfo in its own namespace, then becomes the command
unshare -m --propagation private env TITAN_SIM_INFO="$info" TITAN_SIM_ISA="$isa" bash -c '
  mount --bind "$TITAN_SIM_INFO" /proc/cpuinfo || exit 2
  [ -n "$TITAN_SIM_ISA" ] && export TITAN_ISA=$TITAN_SIM_ISA
  unset TITAN_SIM_INFO TITAN_SIM_ISA
  exec "$@"' cpu_sim "$@"
