#!/usr/bin/env bash
# Data parallelism on one machine: 2 ranks x 1 thread (FSDP, dp_shard 2) against 1 rank x 2
# threads at the same global batch (8 x 256 tokens per step), the ~41M-parameter model of
# plan_check.sh. Prints each run's summary (global tokens/s; for 2 ranks also the seconds per
# step spent in collectives, waits included) and the throughput ratio.
# Usage: bench/bench_dist.sh [BUILD] [STEPS]
set -euo pipefail
build=${1:-build}; steps=${2:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--set dim=512 --set n_layers=8 --set n_heads=8 --set n_kv_heads=4 --set head_dim=64
       --set ffn_dim=1536 --set vocab_size=32000 --random-tokens --seq-len 256 --steps $steps
       --peak-tflops 1 --log-freq 1000)
one=$(OMP_NUM_THREADS=2 "$build/titan" train "${model[@]}" --batch 8 | grep summary)
two=$(OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core -x OMP_NUM_THREADS "$build/titan" train \
      "${model[@]}" --batch 4 2>/dev/null | grep summary)
echo "1 rank x 2 threads:  $one"
echo "2 ranks x 1 thread:  $two"
t1=$(echo "$one" | grep -o ' tokens_per_s=[0-9.]*' | cut -d= -f2)
t2=$(echo "$two" | grep -o ' tokens_per_s=[0-9.]*' | cut -d= -f2)
awk -v a="$t2" -v b="$t1" 'BEGIN { printf "tokens/s ratio (2 ranks / 1 rank): %.3f\n", a / b }'
