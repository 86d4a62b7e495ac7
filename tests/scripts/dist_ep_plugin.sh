#!/usr/bin/env bash
# The grouped-experts plugin (examples/kernels/grouped_tiles.c) under expert parallelism: with
# ep=2 each rank runs grouped_mm on its 2 local experts of 4 (the rows it received), so the
# plugin's per-layer saved tile plan holds the local routing. 5 steps on 2 ranks with the
# plugin on every MoE layer against 1 rank x 2 microbatches with the built-in kernel: losses
# within 1e-5 relative (dist_ep.sh's bound).
# usage: dist_ep_plugin.sh TITAN MPIRUN DIFF_TOOL PLUGIN
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi, losses, same_losses
plugin=$4
m=("${small[@]}" --set tie_embeddings=0 --optimizer.eps 1e-6 --set num_experts=4 --set top_k=2
   --set moe_inter_dim=32 --steps 5 --batch 2)
"$titan" train "${m[@]}" --grad-accum 2 --metrics "$out/ref.jsonl" --dump-folder "$out/ref" \
    > /dev/null
mpi 2 "${m[@]}" --parallelism.expert_parallel_degree 2 --kernels.plugins "$plugin" \
    --kernels.overrides 'layers.*.moe.grouped_mm=grouped_tiles' --metrics "$out/ep.jsonl" \
    --dump-folder "$out/ep" > "$out/ep.log" 2>&1
grep -q "dp_shard 2 x tp 1 x ep 2" "$out/ep.log" || { cat "$out/ep.log"; exit 1; }
grep -q "kernel grouped_mm/grouped_tiles at layers.1" "$out/ep.log" || { cat "$out/ep.log"; exit 1; }
same_losses "ep=2 with grouped_tiles vs 1 rank x 2 microbatches, built-in" "$out/ref.jsonl" \
    "$out/ep.jsonl"
