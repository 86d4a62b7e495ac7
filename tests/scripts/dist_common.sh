# Shared by the mpirun tests (dist.sh, dist_tp.sh, dist_ep.sh), sourced with the script's
# arguments (TITAN MPIRUN DIFF_TOOL ...): sets titan, mpirun, diff_tool, a scratch
# folder out (removed on exit) and small, the tiny dense model every script trains. Runs as
# root in containers and with more ranks than cores. The ranks inherit the environment.
titan=$1; mpirun=$2; diff_tool=$3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
small=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --set vocab_size=300 --random-tokens --seq-len 32 --lr 3e-3 --warmup 2
       --seed 5 --peak-tflops 1 --log-freq 100)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
# mpi NP ARGS...: titan train on NP ranks, one thread each, killed after 120 s (never a hang)
mpi() { local np=$1; shift; timeout 120 "$mpirun" -np "$np" -x OMP_NUM_THREADS "$titan" train "$@"; }
losses() { grep -o '"loss": [^,}]*' "$1" | cut -d' ' -f2; }
source "$(dirname "${BASH_SOURCE[0]}")/args.sh" # without, fixtures
# same_losses NAME A B [FIRST_STEP_OF_B [TOL]]: every loss of B equals A's same step within
# TOL relative (1e-5)
same_losses() {
  local skip=${4:-0} tol=${5:-1e-5}
  paste <(losses "$2" | tail -n +$((skip + 1))) <(losses "$3") | awk -v name="$1" -v tol="$tol" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END { if (n == 0) { print "FAIL " name ": no losses"; exit 1 }
          printf "%s: %d losses, worst relative difference %.2e\n", name, n, worst
          if (worst > tol) { print "FAIL " name; exit 1 } }'
}
# identical_losses NAME A B: the same losses, bit for bit (metrics.jsonl prints 17 digits)
identical_losses() {
  local n; n=$(losses "$2" | wc -l)
  [ "$n" -gt 0 ] && cmp -s <(losses "$2") <(losses "$3") ||
    { echo "FAIL $1: the losses differ"; paste <(losses "$2") <(losses "$3"); exit 1; }
  echo "$1: $n losses, bitwise equal"
}
# wire_check NAME BF16_DUMP FP32_DUMP STEP GROUP EXPECTED...: the profiled step's collectives of
# GROUP on rank 0 (tests/scripts/trace_wire.py, run by $py) are those of the fp32-transport
# run, the exchanges moved in bf16 at half the bytes: EXPECTED is trace_wire.py's lines of the
# kinds it names (first words: halved, halved-bytes, unchanged, order), all of them, in order
wire_check() {
  local t=profile_traces/iteration_$4/rank0_trace.json kinds
  "$py" "$(dirname "${BASH_SOURCE[0]}")/trace_wire.py" "$2/$t" "$3/$t" "$5" > "$out/wire.txt" ||
    { cat "$out/wire.txt"; exit 1; }
  kinds=$(printf '%s\n' "${@:6}" | cut -d' ' -f1 | sort -u | paste -sd'|')
  diff <(grep -E "^($kinds) " "$out/wire.txt") <(printf '%s\n' "${@:6}") > /dev/null ||
    { echo "FAIL $1: expected"; printf '  %s\n' "${@:6}"; cat "$out/wire.txt"; exit 1; }
  echo "$1: $(tr '\n' ';' < "$out/wire.txt")"
}
