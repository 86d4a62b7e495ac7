#!/usr/bin/env bash
# titan plan against measured peak RSS (rank 0's getrusage maxrss, the summary line) for a
# ~41M-parameter model on 1, 2 and 4 ranks, with and without full activation checkpointing.
# Usage: bench/plan_check.sh [BUILD]   (prints a markdown table)
set -euo pipefail
build=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
model=(--set dim=512 --set n_layers=8 --set n_heads=8 --set n_kv_heads=4 --set head_dim=64
       --set ffn_dim=1536 --set vocab_size=32000)
run=(--random-tokens --batch 2 --seq-len 256 --steps 2 --peak-tflops 1 --log-freq 100)
echo "| ranks | AC | reshard | plan GiB | measured peak RSS GiB | plan / measured |"
echo "|---|---|---|---|---|---|"
for np in 1 2 4; do
  for ac in none full; do
    for rs in default never; do
      [ "$np" = 1 ] && [ "$rs" = never ] && continue
      extra=(--activation_checkpoint.mode $ac --parallelism.fsdp_reshard_after_forward $rs)
      plan=$("$build/titan" plan "${model[@]}" "${run[@]}" "${extra[@]}" --world $np |
             awk -v ac=$ac '/total, no checkpointing/ && ac == "none" {print $4}
                            /total, full checkpointing/ && ac == "full" {print $4}')
      if [ "$np" = 1 ]; then
        out=$("$build/titan" train "${model[@]}" "${run[@]}" "${extra[@]}")
      else
        out=$(mpirun -np $np -x OMP_NUM_THREADS "$build/titan" train "${model[@]}" "${run[@]}" \
              "${extra[@]}" 2>/dev/null)
      fi
      rss=$(echo "$out" | grep -o 'peak_rss_gib=[0-9.]*' | cut -d= -f2)
      echo "| $np | $ac | $rs | $plan | $rss | $(awk -v a=$plan -v b=$rss 'BEGIN{printf "%.3f", a/b}') |"
    done
  done
done
