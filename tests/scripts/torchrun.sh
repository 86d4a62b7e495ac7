#!/usr/bin/env bash
# torchrun's variables (WORLD_SIZE, RANK, LOCAL_RANK) without an MPI launcher: `titan train`
# refuses by name before writing anything and prints the mpirun line of the same run, which
# (run as printed) trains on that many ranks; under a real mpirun the same variables are
# ignored and the run trains. Arguments: TITAN MPIRUN (MPIRUN "" = the mpirun parts skipped).
set -uo pipefail
titan=$1; mpirun_bin=${2:-}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
small=(--model.n_layers 2 --model.dim 64 --model.n_heads 4 --model.n_kv_heads 2 --model.head_dim 16
       --model.ffn_dim 128 --model.vocab_size 300 --training.seq_len 32 --training.local_batch_size 2
       --training.steps 1 --metrics.log_freq 1)
step_re='^(\[titan\] [^ ]+ [^ ]+ - )?step:'
fail() { echo "FAIL: $1"; cat "$2"; exit 1; }

# 1. torchrun's three variables, as torchrun --nproc-per-node 2 sets them on rank 0
WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 "$titan" train "${small[@]}" \
  --job.description "it's torchrun" --job.dump_folder "$out/tr" > "$out/tr.log" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "torchrun variables: exit 0" "$out/tr.log"
grep -q "started by torchrun (WORLD_SIZE=2, RANK=0, LOCAL_RANK=0) and not by an MPI launcher" \
  "$out/tr.log" || fail "torchrun variables: not named" "$out/tr.log"
! grep -qE "$step_re" "$out/tr.log" || fail "torchrun variables: a step ran" "$out/tr.log"
[ ! -e "$out/tr" ] || fail "torchrun variables: the dump folder was written" "$out/tr.log"
line=$(grep -A1 "the same run under MPI" "$out/tr.log" | tail -1 | sed 's/^ *//')
expect="mpirun -np 2 $titan train ${small[*]} --job.description 'it'\\''s torchrun' --job.dump_folder $out/tr"
[ "$line" = "$expect" ] || { echo "FAIL: mpirun line"; echo " got:  $line"; echo " want: $expect"; exit 1; }
echo "ok refused by name, with: $line"

# 2. one variable alone, on a rank other than 0: refused, naming it; no line (rank 0 prints it)
RANK=1 "$titan" train "${small[@]}" --job.dump_folder "$out/r1" > "$out/r1.log" 2>&1 &&
  fail "RANK=1: exit 0" "$out/r1.log"
grep -q "started by torchrun (RANK=1)" "$out/r1.log" && grep -q "RANK 0 prints the line" "$out/r1.log" &&
  ! grep -q "mpirun -np" "$out/r1.log" || fail "RANK=1: message" "$out/r1.log"
echo "ok RANK=1 alone refused"

[ -n "$mpirun_bin" ] || { echo "skipped: the mpirun parts (no mpirun)"; exit 0; }
# 3. the printed line, run as printed (its quoting included): 2 ranks train
mpirun() { timeout 120 "$mpirun_bin" "$@"; }
eval "$line" > "$out/line.log" 2>&1 || fail "the printed mpirun line" "$out/line.log"
grep -qE "$step_re" "$out/line.log" && grep -q "x 2 data-parallel ranks" "$out/line.log" ||
  fail "the printed mpirun line: no 2-rank step" "$out/line.log"
echo "ok the printed line trains on 2 ranks"
# 4. under a real mpirun, with torchrun's variables also set: not refused
WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 timeout 120 "$mpirun_bin" -np 2 -x WORLD_SIZE -x RANK -x LOCAL_RANK \
  "$titan" train "${small[@]}" --job.dump_folder "$out/mpi" > "$out/mpi.log" 2>&1 ||
  fail "under mpirun with torchrun's variables" "$out/mpi.log"
grep -qE "$step_re" "$out/mpi.log" && ! grep -q "torchrun" "$out/mpi.log" ||
  fail "under mpirun: no step, or torchrun named" "$out/mpi.log"
echo "ok under mpirun the variables are ignored"
