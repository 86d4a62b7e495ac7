#!/usr/bin/env bash
# A process whose cgroup has a CPU quota (docker --cpus, a Kubernetes limit) runs as many
# OpenMP threads as the quota's CPUs, rounded up, and says so (OpenMP had started one per CPU
# it sees, throttled in turn); OMP_NUM_THREADS and --threads still choose. A cgroup with a
# quota of half a CPU is made for the test (root: cgroup v1's cpu controller or v2's); skipped
# (77) where neither can be made.
set -uo pipefail
titan=$1; out=$(mktemp -d); name=titan_test_quota_$$; grp=
cleanup() { [ -n "$grp" ] && rmdir "$grp" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
for root in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
  if [ -w "$root" ] && [ -e "$root/cpu.cfs_quota_us" ] && mkdir "$root/$name" 2>/dev/null; then
    grp=$root/$name
    echo 50000 > "$grp/cpu.cfs_quota_us" && echo 100000 > "$grp/cpu.cfs_period_us" || grp=
    break
  fi
done
if [ -z "$grp" ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
   mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
  grp=/sys/fs/cgroup/$name
  echo "50000 100000" > "$grp/cpu.max" || grp=
fi
[ -n "$grp" ] || { echo "skip: cannot make a cgroup with a CPU quota here"; exit 77; }
[ "$(nproc)" -ge 2 ] || { echo "skip: one CPU"; exit 77; }
procs=$grp/cgroup.procs; [ -e "$procs" ] || procs=$grp/tasks
extra=()
run() { # COMMAND...: COMMAND (env ... titan) train [extra] in the quota's cgroup
  bash -c 'echo $$ > "$0"; exec "$@"' "$procs" "$@" train "${extra[@]}" --set n_layers=1 --set dim=64 \
    --set n_heads=4 --set n_kv_heads=2 --set head_dim=16 --set ffn_dim=128 --set vocab_size=300 \
    --random-tokens --batch 1 --seq-len 8 --steps 1 --peak-tflops 1 --checkpoint.enable false \
    --dump-folder "$out/run" 2>&1
}
fail=0
o=$(run env -u OMP_NUM_THREADS "$titan")
if grep -q "parallelism: 1 process, 1 threads (this process's cgroup gives it 0.50 CPUs" <<< "$o"; then
  echo "ok   a quota of 0.5 CPUs: 1 thread, said"
else echo "FAIL a quota of 0.5 CPUs:"; echo "$o" | head -12; fail=1; fi
o=$(run env OMP_NUM_THREADS=2 "$titan")
if grep -q "parallelism: 1 process, 2 threads;" <<< "$o"; then
  echo "ok   OMP_NUM_THREADS=2 still chooses"
else echo "FAIL OMP_NUM_THREADS=2 in the quota:"; echo "$o" | head -12; fail=1; fi
extra=(--threads 2)
o=$(run env -u OMP_NUM_THREADS "$titan")
grep -q "parallelism: 1 process, 2 threads;" <<< "$o" && echo "ok   --threads 2 still chooses" ||
  { echo "FAIL --threads 2 in the quota:"; echo "$o" | head -12; fail=1; }
exit $fail
