#!/usr/bin/env bash
# A kernel plugin that fails on one rank only, under mpirun (2 ranks): every rank stops, none
# hangs (each run is killed after 120 s by dist_common.sh's mpi), and the error names the rank,
# the plugin and (at run time) the kernel and its layer.
#  1. libtest_plugin_rankfail.so's init fails on rank 1 (a plugin missing or broken there);
#  2. libtest_plugin_fail.so's swiglu_fail returns an error code on rank 1 only, in forward of
#     layers.1, while rank 0 goes on into the step's collectives.
# usage: dist_plugin_rank.sh TITAN MPIRUN DIFF_TOOL PLUGIN_DIR
set -uo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi
dir=$4
m=("${small[@]}" --steps 2 --batch 2 --checkpoint.enable false)
fail=0
expect() { # NAME LOG RC REGEX: the run failed (not by timeout) and the log matches REGEX
  if [ "$3" = 0 ] || [ "$3" = 124 ]; then echo "FAIL $1: exit $3 (0: ran; 124: hung)"; fail=1
  elif ! grep -qE "$4" "$2"; then echo "FAIL $1: no /$4/ in the log"; tail -5 "$2"; fail=1
  else echo "ok   $1: exit $3, $(grep -oE "$4" "$2" | head -1)"; fi
}
mpi 2 "${m[@]}" --dump-folder "$out/a" --kernels.plugins "$dir/libtest_plugin_rankfail.so" \
    --kernels.overrides 'swiglu=swiglu_ws' > "$out/a.log" 2>&1
expect "init fails on rank 1" "$out/a.log" $? \
  "error \(rank 1 of 2\): .*kernel plugin [^ ]*libtest_plugin_rankfail.so: not on this rank"
TITAN_TEST_FAIL_RANK=1 mpi 2 "${m[@]}" --dump-folder "$out/b" \
    --kernels.plugins "$dir/libtest_plugin_fail.so" \
    --kernels.overrides 'layers.1.feed_forward.swiglu=swiglu_fail' > "$out/b.log" 2>&1
expect "a kernel error on rank 1" "$out/b.log" $? \
  "\[rank1\] \[titan error\] kernel swiglu/swiglu_fail \(plugin [^)]*libtest_plugin_fail.so\) at layers.1: forward returned 3"
exit $fail
