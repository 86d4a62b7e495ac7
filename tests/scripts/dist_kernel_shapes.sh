#!/usr/bin/env bash
# A kernel's constraint check sees the shapes this rank's calls of its op get, under mpirun
# (2 ranks; libtest_plugin_tile32.so, whose kernels return an error code when called outside
# their declared constraint, as a real tiled kernel would read out of bounds):
#  1. sequence parallelism (tp 2): add_rmsnorm runs on the residual stream's shard,
#     batch x seq_len / tp rows. add_rmsnorm_tile32 (rows % 32 == 0) at batch 1, seq_len 32 is
#     refused at build naming 16 rows (batch = 1, seq_len = 16), not called with 16; at seq_len
#     64 (32 rows a call) it trains;
#  2. expert parallelism (ep 2): grouped_mm runs on n_experts / ep experts. grouped_x8
#     (n_experts % 8 == 0) with 8 experts is refused naming n_experts = 4, not called with 4;
#     with 16 experts (8 a rank) it trains.
# usage: dist_kernel_shapes.sh TITAN MPIRUN DIFF_TOOL PLUGIN_DIR
set -uo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi
plugin=$4/libtest_plugin_tile32.so
m=("${small[@]}" --steps 1 --batch 1 --checkpoint.enable false --kernels.plugins "$plugin")
tp=(--parallelism.tensor_parallel_degree 2 --kernels.overrides 'add_rmsnorm=add_rmsnorm_tile32')
ep=(--set tie_embeddings=0 --set top_k=2 --set moe_inter_dim=32
    --parallelism.expert_parallel_degree 2 --kernels.overrides 'grouped_mm=grouped_x8')
fail=0
refused() { # NAME LOG RC TEXT: the run failed (not by timeout) and the log has TEXT
  if [ "$3" = 0 ] || [ "$3" = 124 ]; then echo "FAIL $1: exit $3 (0: ran; 124: hung)"; fail=1
  elif ! grep -qF "$4" "$2"; then echo "FAIL $1: no '$4' in the log"; tail -4 "$2"; fail=1
  else echo "ok   $1: refused, '$4'"; fi
}
ran() { # NAME LOG RC TEXT: the run succeeded and the log has TEXT
  if [ "$3" != 0 ] || ! grep -qF "$4" "$2"; then
    echo "FAIL $1: exit $3, or no '$4' in the log"; tail -4 "$2"; fail=1
  else echo "ok   $1: trained"; fi
}
mpi 2 "${m[@]}" "${tp[@]}" --seq-len 32 --dump-folder "$out/a" > "$out/a.log" 2>&1
refused "tp 2, 32 tokens: add_rmsnorm gets 16 rows a call" "$out/a.log" $? \
  "kernel add_rmsnorm/add_rmsnorm_tile32 at layers.0: batch * seq_len % 32 == 0 (batch = 1, seq_len = 16) (sequence parallelism: this rank's calls get batch x seq_len / tp = 1 x 32 / 2 tokens)"
mpi 2 "${m[@]}" "${tp[@]}" --seq-len 64 --dump-folder "$out/b" > "$out/b.log" 2>&1
ran "tp 2, 64 tokens: add_rmsnorm gets 32 rows a call" "$out/b.log" $? \
  "kernel add_rmsnorm/add_rmsnorm_tile32 at layers.1"
mpi 2 "${m[@]}" "${ep[@]}" --set num_experts=8 --dump-folder "$out/c" > "$out/c.log" 2>&1
refused "ep 2, 8 experts: grouped_mm runs on 4 a rank" "$out/c.log" $? \
  "kernel grouped_mm/grouped_x8 at layers.0: n_experts % 8 == 0 (n_experts = 4) (expert parallelism: this rank's calls get n_experts / ep = 8 / 2 experts)"
mpi 2 "${m[@]}" "${ep[@]}" --set num_experts=16 --dump-folder "$out/d" > "$out/d.log" 2>&1
ran "ep 2, 16 experts: grouped_mm runs on 8 a rank" "$out/d.log" $? \
  "kernel grouped_mm/grouped_x8 at layers.1"
exit $fail
