# The MFU peak under mpirun: only rank 0 measures and every rank gets its figure (then the
# cached one when rank 0 measures lower). The checks are in tests/unit/test_peak.c, which
# runs them when started on more than one rank.
# usage: dist_peak.sh TEST_PEAK MPIRUN
source "$(dirname "$0")/dist_common.sh" "$1" "$2" none
timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS "$titan" "$out/cache"
