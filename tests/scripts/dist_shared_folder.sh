#!/usr/bin/env bash
# Checkpoints on 2 ranks whose checkpoint folder is not shared (each rank's machine has its own
# folder at the same path, simulated by a private tmpfs per rank: unshare -m, root): the run
# stops before its first step, naming the folder and the need for one shared by all ranks
# (whichever rank prints first: rank 1 its own error, rank 0 "rank 1 cannot use ..."; it
# trained until the first save, then failed as "another rank could not write its shard", or a
# resume found only rank 0's shard). The same run on the shared folder trains; two working
# directories on one machine (the default relative folder) are named as such. Skipped (77)
# where mount namespaces are unavailable.
set -uo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi
unshare -m --propagation private sh -c "mount -t tmpfs none '$out'" 2>/dev/null ||
  { echo "skip: no mount namespaces here"; exit 77; }
mkdir -p "$out/ck"
cat > "$out/wrap.sh" <<W
#!/bin/bash
exec unshare -m --propagation private bash -c 'mount -t tmpfs none "\$0" && exec "\$@"' "$out/ck" "\$@"
W
chmod +x "$out/wrap.sh"
m=("${small[@]}" --batch 2 --steps 4 --checkpoint-interval 2 --dump-folder "$out/ck/run")
export TITAN_SHARED_FOLDER_WAIT=2 # the wait for a late file (NFS): 20 s by default
timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS -x TITAN_SHARED_FOLDER_WAIT "$out/wrap.sh" "$titan" train "${m[@]}" > "$out/a.log" 2>&1
rc=$?
fail=0
if [ $rc != 0 ] && [ $rc != 124 ] && ! grep -q "step:" "$out/a.log" &&
   grep -qE "titan: error \(rank [01] of 2\): (rank 1 cannot use the checkpoint folder: )?$out/ck/run/checkpoint is not the folder rank 0 writes: .* must be one folder all ranks share" "$out/a.log"; then
  echo "ok   a checkpoint folder not shared between ranks: refused before the first step, named"
else echo "FAIL a checkpoint folder not shared between ranks (rc $rc):"; cat "$out/a.log"; fail=1; fi
mpi 2 "${m[@]}" > "$out/b.log" 2>&1
rc=$?
if [ $rc = 0 ] && [ -d "$out/ck/run/checkpoint/step-4" ] && ! ls -A "$out/ck/run/checkpoint" | grep -q shared; then
  echo "ok   the shared folder: trained and saved, no probe file left"
else echo "FAIL the shared folder (rc $rc):"; cat "$out/b.log"; ls -A "$out/ck/run/checkpoint"; fail=1; fi
# the default relative folder from two working directories on one machine: named as such
mkdir -p "$out/wa" "$out/wb"
titan=$(realpath "$titan") # run from the two folders
r=("${small[@]}" --batch 2 --steps 2 --checkpoint-interval 2)
timeout 120 "$mpirun" -x OMP_NUM_THREADS -x TITAN_SHARED_FOLDER_WAIT -np 1 -wdir "$out/wa" "$titan" train "${r[@]}" : \
  -np 1 -wdir "$out/wb" "$titan" train "${r[@]}" > "$out/c.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -qE "the checkpoint folder (\\./)?checkpoint is $out/wb/(\\./)?checkpoint on this rank but $out/wa/(\\./)?checkpoint on rank 0, on the same machine .*working directories differ" "$out/c.log"; then
  echo "ok   two working directories: named"
else echo "FAIL two working directories (rc $rc):"; grep -v 'titan info' "$out/c.log" | head -30; fail=1; fi
exit $fail
