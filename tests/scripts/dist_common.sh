# Shared by the mpirun tests (dist.sh, dist_tp.sh, dist_ep.sh); sourced after they set
# titan, mpirun and out. Runs as root in containers and with more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
# mpi NP ARGS...: titan train on NP ranks, one thread each, killed after 120 s (never a hang)
mpi() { local np=$1; shift; timeout 120 "$mpirun" -np "$np" -x OMP_NUM_THREADS "$titan" train "$@"; }
losses() { grep -o '"loss": [^,}]*' "$1" | cut -d' ' -f2; }
# same_losses NAME A B [FIRST_STEP_OF_B]: every loss of B equals A's same step within 1e-5
same_losses() {
  local skip=${4:-0}
  paste <(losses "$2" | tail -n +$((skip + 1))) <(losses "$3") | awk -v name="$1" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END { if (n == 0) { print "FAIL " name ": no losses"; exit 1 }
          printf "%s: %d losses, worst relative difference %.2e\n", name, n, worst
          if (worst > 1e-5) { print "FAIL " name; exit 1 } }'
}
