#!/usr/bin/env bash
# Exact resume: 12 steps straight against 6 steps, stop, resume from the step-6 checkpoint,
# 6 more: the losses and gradient norms of steps 7..12 must be bitwise identical (%.17g).
# Covered: JSONL + tokenizer data that restarts its epoch mid-run, with gradient
# accumulation, streaming and map-style (reshuffled each epoch), a weighted mixture of two
# sources; random tokens; background and synchronous saves; keep_latest_k pruning;
# a last save that is weights-only (the default): a saving run from it refused, load_only
# starting afresh from its weights; the full-state initial
# load (checkpoint.initial_load_model_only = false: torchtitan's) from another run's step-6,
# identical to resuming it; resuming with another tokenizer, and a step-N folder that is not a
# titan checkpoint (torchtitan's DCP, a last_save_in_hf export), refused; a checkpoint shard
# with one flipped bit refused by its CRC-32C; changed AdamW settings, random tokens' seed and MoE
# balancing on resume said.
set -euo pipefail
titan=$1; shared=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf '{"text": "%s"}\n' "The quick brown fox jumps over the lazy dog." "Pack my box with five \
dozen liquor jugs." "How vexingly quick daft zebras jump!" "Sphinx of black quartz, judge my vow." \
  > "$out/docs.jsonl"
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --steps 12 --batch 2 --seq-len 24 --lr 3e-3 --warmup 3 --seed 7
       --peak-tflops 1 --log-freq 100)
field() { grep -o "\"$2\": [^,}]*" "$1"; }
check() { # name, straight metrics, first part, second part
  for f in loss grad_norm; do
    if ! diff <(field "$2" $f) <(cat <(field "$3" $f) <(field "$4" $f)); then
      echo "FAIL $1: resumed run differs in $f"; exit 1; fi
  done
  n=$(field "$4" loss | grep -c .)
  [ "$n" -eq 6 ] || { echo "FAIL $1: resumed run logged $n steps, want 6"; exit 1; }
  echo "ok $1: steps 7..12 identical after resume"
}
run() { # name, extra args...
  local name=$1; shift
  "$titan" train "${model[@]}" "$@" --metrics "$out/$name-full.jsonl" \
      --dump-folder "$out/$name-full" >/dev/null
  "$titan" train "${model[@]}" "$@" --metrics "$out/$name-a.jsonl" --dump-folder "$out/$name" \
      --checkpoint-interval 3 --stop-after-step 6 >/dev/null
  "$titan" train "${model[@]}" "$@" --metrics "$out/$name-b.jsonl" --dump-folder "$out/$name" \
      --checkpoint-interval 3 --keep-latest-k 2 > "$out/$name.log"
  grep -q "resumed from $out/$name/checkpoint/step-6" "$out/$name.log" ||
    { echo "FAIL $name: did not resume from step 6"; cat "$out/$name.log"; exit 1; }
  check "$name" "$out/$name-full.jsonl" "$out/$name-a.jsonl" "$out/$name-b.jsonl"
}
run jsonl --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" --grad-accum 2
run random --random-tokens --set vocab_size=300 --sync-checkpoint
# map-style order (each epoch reshuffled: the state's epoch and place in its order)
run jsonl_map --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" --grad-accum 2 \
  --training.dataset_streaming false
# a weighted mixture of two sources (torchtitan 0.3's interleaved loader): each source's place
# and the draws made
printf 'The second source, a text file.\n\nIts paragraphs are documents, longer than the first \
ones.\n\nA third.\n' > "$out/more.txt"
run mix --training.dataset_sources "$out/docs.jsonl,$out/more.txt" \
  --training.dataset_weights 3,1 --tokenizer "$shared/data/test_tokenizer" --grad-accum 2
# the windows each source gave, carried by the checkpoint: the resumed run's last step says the
# straight run's, 48 in all (12 steps x 2 microbatches x 2 rows)
w_full=$(tail -1 "$out/mix-full.jsonl" | grep -o '"data_source_windows": \[[0-9, ]*\]')
w_res=$(tail -1 "$out/mix-b.jsonl" | grep -o '"data_source_windows": \[[0-9, ]*\]')
[ -n "$w_full" ] && [ "$w_full" = "$w_res" ] &&
  [ $(( $(echo "$w_full" | grep -o '[0-9]\+' | paste -sd+) )) = 48 ] ||
  { echo "FAIL mix: data_source_windows '$w_full' straight, '$w_res' resumed"; exit 1; }
echo "ok mix: $w_full at step 12, straight and resumed"
# the full training state from another run's step-6 (saves go to this run's folder): steps 7..12
# as the straight run's, and the source folder untouched
"$titan" train "${model[@]}" --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" \
    --grad-accum 2 --dump-folder "$out/src" --checkpoint-interval 3 --stop-after-step 6 >/dev/null
cp -r "$out/src/checkpoint/step-6" "$out/step6-copy"
"$titan" train "${model[@]}" --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" \
    --grad-accum 2 --metrics "$out/init-b.jsonl" --dump-folder "$out/init" \
    --checkpoint.initial_load_path "$out/src/checkpoint/step-6" \
    --checkpoint.initial_load_model_only=false > "$out/init.log"
grep -q "resumed from $out/src/checkpoint/step-6" "$out/init.log" ||
  { echo "FAIL initial_load_model_only = false: no resume"; cat "$out/init.log"; exit 1; }
check "initial_load_model_only=false" "$out/jsonl-full.jsonl" "$out/jsonl-a.jsonl" "$out/init-b.jsonl"
[ -d "$out/init/checkpoint/step-12" ] || { echo "FAIL: no step-12 in the new run's folder"; exit 1; }
diff -r "$out/step6-copy" "$out/src/checkpoint/step-6" > /dev/null ||
  { echo "FAIL: the initial load's folder changed"; exit 1; }
refused() { # name, regex, args... (training must fail with the message)
  local name=$1 re=$2; shift 2
  if "$titan" train "${model[@]}" "$@" > "$out/r.log" 2>&1; then
    echo "FAIL $name: accepted"; cat "$out/r.log"; exit 1; fi
  grep -qE "$re" "$out/r.log" || { echo "FAIL $name:"; cat "$out/r.log"; exit 1; }
  echo "ok $name refused: $(grep -E "$re" "$out/r.log" | head -1)"
}
# another tokenizer (same ids and specials, another tokenizer.json) against the data position
cp -r "$shared/data/test_tokenizer" "$out/tok2" && echo " " >> "$out/tok2/tokenizer.json"
mkdir -p "$out/tk/checkpoint" && cp -r "$out/step6-copy" "$out/tk/checkpoint/step-6"
refused "resume with another tokenizer" "step-6: its data position was counted with the tokenizer" \
  --data "$out/docs.jsonl" --tokenizer "$out/tok2" --grad-accum 2 --dump-folder "$out/tk" --checkpoint.enable
# a step-N folder without metadata.json, newer than the titan ones: not silently skipped
mkdir -p "$out/tk/checkpoint/step-8" && touch "$out/tk/checkpoint/step-8/__0_0.distcp"
refused "a newer non-titan step folder" "step-8 is not a titan checkpoint" \
  --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" --grad-accum 2 \
  --dump-folder "$out/tk" --checkpoint.enable
# torchtitan's own checkpoint (DCP: .metadata) there: named as such, with the conversion
touch "$out/tk/checkpoint/step-8/.metadata"
refused "a newer torchtitan (DCP) step folder" \
  "step-8 is a torchtitan \(DCP\) checkpoint .*checkpoint_conversion/convert_to_hf.py" \
  --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" --grad-accum 2 \
  --dump-folder "$out/tk" --checkpoint.enable
rm -rf "$out/tk/checkpoint/step-8"
# a mixture's position is no single dataset's (nor one of other sources)
mkdir -p "$out/mx/checkpoint" && cp -r "$out/mix/checkpoint/step-9" "$out/mx/checkpoint/"
refused "a mixture's position with one dataset" "the position is of a mixture of 2 sources" \
  --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" --grad-accum 2 \
  --dump-folder "$out/mx" --checkpoint.enable
refused "a mixture's position with three sources" "a mixture of 2 sources; this run reads 3" \
  --training.dataset_sources "$out/docs.jsonl,$out/more.txt,$out/more.txt" \
  --tokenizer "$shared/data/test_tokenizer" --grad-accum 2 --dump-folder "$out/mx" \
  --checkpoint.enable
"$titan" train "${model[@]}" --random-tokens --set vocab_size=300 --steps 2 --dump-folder "$out/lh" \
  --checkpoint.enable --checkpoint.last_save_in_hf > /dev/null
refused "a last_save_in_hf export as the newest step" "step-2 is a Hugging Face folder" \
  --random-tokens --set vocab_size=300 --steps 4 --dump-folder "$out/lh" --checkpoint.enable
# the full-state initial load needs a titan checkpoint holding the full state
refused "initial_load_model_only = false from a weights-only step" "holds weights only" \
  --dump-folder "$out/x1" \
  --checkpoint.initial_load_path "$out/jsonl/checkpoint/step-12" \
  --checkpoint.initial_load_model_only=false --data "$out/docs.jsonl" \
  --tokenizer "$shared/data/test_tokenizer"
refused "initial_load_model_only = false from a Hugging Face folder" \
  "only a titan training checkpoint .* holds; .*lh/checkpoint/step-2 is" \
  --random-tokens --set vocab_size=300 --dump-folder "$out/x2" \
  --checkpoint.initial_load_path "$out/lh/checkpoint/step-2" \
  --checkpoint.initial_load_model_only=false
# keep_latest_k 2 after saves at 3, 6, 9, 12: only 9 and 12 remain
left=$(ls "$out/jsonl/checkpoint" | tr '\n' ' ')
[ "$left" = "step-12 step-9 " ] || { echo "FAIL keep_latest_k: left $left"; exit 1; }
# the last save (step 12) is weights-only: a run in that folder would start at step 1 and write
# its checkpoints among the old run's newer ones (keep_latest_k pruned each new save at once,
# and every resume loaded step-12 again): refused, naming the way that works, and nothing
# there changes; with checkpoint.load_only (no saves) it starts a fresh run from the weights
before=$(ls "$out/jsonl/checkpoint" | tr '\n' ' ')
refused "a saving run below its folder's newest step" "To train on from those weights" \
  --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" \
  --grad-accum 2 --dump-folder "$out/jsonl" --checkpoint-interval 3 --steps 3
[ "$(ls "$out/jsonl/checkpoint" | tr '\n' ' ')" = "$before" ] ||
  { echo "FAIL the refused run changed the checkpoint folder"; exit 1; }
"$titan" train "${model[@]}" --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" \
    --grad-accum 2 --dump-folder "$out/jsonl" --checkpoint.enable --checkpoint.load_only --steps 1 \
    --metrics "$out/fresh.jsonl" > "$out/fresh.log"
grep -q "loaded weights of .*step-12 (model only)" "$out/fresh.log" &&
  [ "$(field "$out/fresh.jsonl" step)" = '"step": 1' ] ||
  { echo "FAIL weights-only resume"; cat "$out/fresh.log"; exit 1; }
echo "ok weights-only last checkpoint: a saving run below it refused, load_only starts afresh from it"
# a checkpoint of another model is refused with both shapes named (load_only: its newest step
# is weights-only, which a saving run there is refused for first, above)
if "$titan" train "${model[@]}" --set dim=32 --random-tokens --set vocab_size=300 \
    --dump-folder "$out/random" --checkpoint-interval 3 --checkpoint.load_only \
    > "$out/other.log" 2>&1; then
  echo "FAIL: a checkpoint of another model was accepted"; exit 1; fi
grep -qE "is not this run's: dim [0-9]+ \(this run 32\)" "$out/other.log" || { cat "$out/other.log"; exit 1; }
echo "ok a checkpoint of another model is refused, the field that differs named first"
# a step checkpoint converts to a Hugging Face folder that titan inspect validates
"$titan" convert "$out/jsonl/checkpoint/step-9" "$out/hf9" --dtype bfloat16 > /dev/null
"$titan" inspect "$out/hf9" > "$out/inspect.log" || { cat "$out/inspect.log"; exit 1; }
echo "ok step-9 converts to an HF folder (bf16) that inspects clean"
# convert refuses, before writing anything: into its own source (or a folder holding it), a
# missing assets folder, a generation config that is not JSON
before=$(ls -A "$out/jsonl/checkpoint/step-9")
refused_cv() { # name, regex, convert args...
  local name=$1 re=$2; shift 2
  if "$titan" convert "$@" > "$out/cv.log" 2>&1; then echo "FAIL convert $name: accepted"; exit 1; fi
  grep -qE "$re" "$out/cv.log" || { echo "FAIL convert $name:"; cat "$out/cv.log"; exit 1; }
  echo "ok convert $name refused"
}
refused_cv "into its source" "the output folder is \(or holds\) the source" \
  "$out/jsonl/checkpoint/step-9" "$out/jsonl/checkpoint/step-9"
refused_cv "into a folder holding its source" "the output folder is \(or holds\) the source" \
  "$out/jsonl/checkpoint/step-9" "$out/jsonl"
[ "$(ls -A "$out/jsonl/checkpoint/step-9")" = "$before" ] && [ ! -e "$out/jsonl/config.json" ] ||
  { echo "FAIL convert wrote into its source"; ls -A "$out/jsonl/checkpoint/step-9"; exit 1; }
refused_cv "with a missing assets folder" "/nonexistent: no such assets folder" \
  "$out/jsonl/checkpoint/step-9" "$out/hfa" --assets /nonexistent
echo '{"bos_token_id": 1,' > "$out/badgen.json"
refused_cv "with a generation config that is not JSON" "badgen.json: not valid JSON" \
  "$out/jsonl/checkpoint/step-9" "$out/hfg" --generation-config "$out/badgen.json"
[ ! -e "$out/hfa" ] && [ ! -e "$out/hfg" ] || { echo "FAIL convert left a folder behind"; exit 1; }
# titan inspect checks what a load checks: a tied model's lm_head copy must be the embedding
cp -r "$shared/data/tiny_qwen3" "$out/tied"
sed -i 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$out/tied/config.json"
if "$titan" inspect "$out/tied" > "$out/tied.log" 2>&1; then
  echo "FAIL inspect passed a tied model whose lm_head differs"; exit 1; fi
grep -q "'lm_head.weight' differs from 'model.embed_tokens.weight'" "$out/tied.log" ||
  { cat "$out/tied.log"; exit 1; }
echo "ok titan inspect refuses a tied model's differing lm_head, as a load does"
# titan inspect validates a step checkpoint against the model it names
"$titan" inspect "$out/jsonl/checkpoint/step-9" > "$out/inspect9.log" &&
  grep -q "ok: every shard opens, the weights buffer fits the model and every recorded CRC-32C matches" "$out/inspect9.log" ||
  { echo "FAIL inspect step-9"; cat "$out/inspect9.log"; exit 1; }
echo "ok titan inspect step-9"
# a shard the metadata does not list (a copy from a 2-rank run): said, not ignored in silence
cp -r "$out/jsonl/checkpoint/step-9" "$out/extra9" && mkdir -p "$out/extra/checkpoint" &&
  mv "$out/extra9" "$out/extra/checkpoint/step-9" &&
  cp "$out/extra/checkpoint/step-9/rank-00000.safetensors" "$out/extra/checkpoint/step-9/rank-00001.safetensors"
"$titan" inspect "$out/extra/checkpoint/step-9" > "$out/extra.log" 2>&1
grep -q "step-9/rank-00001.safetensors: not a shard of this checkpoint (its metadata.json has world_size 1): ignored" "$out/extra.log" ||
  { echo "FAIL an unlisted shard is not said"; cat "$out/extra.log"; exit 1; }
echo "ok an unlisted shard in a step folder is said"
# one flipped bit in a shard (the last tensor, adam_v): inspect and a resume both refuse it,
# naming the file and the tensor, instead of training on a silently changed moment
cp -r "$out/jsonl" "$out/bad"
shard="$out/bad/checkpoint/step-9/rank-00000.safetensors"
at=$(( $(stat -c %s "$shard") - 10 ))
byte=$(od -An -tu1 -j "$at" -N1 "$shard" | tr -d ' ')
printf "\\$(printf %o $(( byte ^ 4 )))" | dd of="$shard" bs=1 seek="$at" conv=notrunc status=none
if "$titan" inspect "$out/bad/checkpoint/step-9" > "$out/bad.log" 2>&1; then
  echo "FAIL inspect passed a corrupt shard"; exit 1; fi
grep -q "rank-00000.safetensors: tensor \"adam_v\" is corrupt" "$out/bad.log" ||
  { echo "FAIL inspect of a corrupt shard"; cat "$out/bad.log"; exit 1; }
if "$titan" train "${model[@]}" --data "$out/docs.jsonl" --tokenizer "$shared/data/test_tokenizer" \
    --grad-accum 2 --dump-folder "$out/bad" --checkpoint-interval 3 --checkpoint.load_step 9 \
    > "$out/bad-train.log" 2>&1; then
  echo "FAIL resumed from a corrupt shard"; exit 1; fi
grep -q "rank-00000.safetensors: tensor \"adam_v\" is corrupt" "$out/bad-train.log" ||
  { echo "FAIL resume from a corrupt shard"; cat "$out/bad-train.log"; exit 1; }
echo "ok a flipped bit in a checkpoint shard refused by inspect and by resume"
# a step folder under another name is told to be named step-N (not "no metadata.json")
cp -r "$out/jsonl/checkpoint/step-9" "$out/copy9"
if "$titan" inspect "$out/copy9" > "$out/copy9.log" 2>&1; then
  echo "FAIL inspect passed a misnamed step folder"; exit 1; fi
grep -q "copy9: a checkpoint step folder must be named step-N" "$out/copy9.log" ||
  { echo "FAIL inspect of a misnamed step folder"; cat "$out/copy9.log"; exit 1; }
echo "ok a misnamed step folder: inspect says it must be named step-N"
# a run folder whose newest step-N is not titan's: generate reads the newest titan step and says so
mkdir "$out/jsonl/checkpoint/step-99"
"$titan" generate --model "$out/jsonl" --ids --prompt "1 2" --max-new-tokens 1 > "$out/gen99.log" 2>&1 ||
  { echo "FAIL generate from a run folder with a foreign step"; cat "$out/gen99.log"; exit 1; }
[ "$(grep -c "checkpoint/step-99 is newer but not a titan checkpoint .*; reading step-12" "$out/gen99.log")" = 1 ] ||
  { echo "FAIL generate did not say (once) which step it read"; cat "$out/gen99.log"; exit 1; }
rmdir "$out/jsonl/checkpoint/step-99"
echo "ok generate names the step it reads past a newer foreign step-N, once"
# a resume with another global batch is allowed (as torchtitan) and said; with the same, silent
cp -r "$out/random" "$out/rb"
"$titan" train "${model[@]}" --random-tokens --set vocab_size=300 --dump-folder "$out/rb" \
  --checkpoint-interval 3 --checkpoint.load_step 9 \
  --batch 4 --stop-after-step 10 > "$out/rb.log" 2>&1 || { cat "$out/rb.log"; exit 1; }
grep -q "step-9 was trained with a global batch of 2 x 24 tokens; this run uses 4 x 24" "$out/rb.log" ||
  { echo "FAIL a resume with another batch size was not said"; cat "$out/rb.log"; exit 1; }
! grep -q "was trained with a global batch" "$out/random.log" ||
  { echo "FAIL a resume with the same batch size warned"; exit 1; }
echo "ok a resume with another global batch size is said"
# AdamW's hyperparameters and the random tokens' seed changed on resume: applied (the config's,
# where torchtitan keeps the checkpoint's) and said, each; unchanged ones (rb above) silent
cp -r "$out/random" "$out/rh"
"$titan" train "${model[@]}" --random-tokens --set vocab_size=300 --dump-folder "$out/rh" \
  --checkpoint-interval 3 --checkpoint.load_step 9 --stop-after-step 10 --lr 1e-2 --seed 8 \
  --optimizer.weight_decay 0.3 --optimizer.eps 1e-6 --optimizer.name Adam \
  --optimizer.implementation fused_opt_states_bf16 > "$out/rh.log" 2>&1 ||
  { cat "$out/rh.log"; exit 1; }
for w in "optimizer.lr = 0.003; this run sets 0.01" "optimizer.weight_decay = 0.1; this run sets 0.3" \
         "optimizer.name = AdamW; this run's Adam applies from here" \
         "keeps the AdamW moments in float32; this run in bfloat16 .*rounded to bf16" \
         "optimizer.eps = 1e-08; this run sets 1e-06" "random tokens drawn with seed 7; this run's seed 8"; do
  grep -q "step-9 was trained with $w\|step-9 was trained on $w\|step-9 $w" "$out/rh.log" ||
    { echo "FAIL a resume with a changed setting not said: $w"; cat "$out/rh.log"; exit 1; }
done
[ "$(grep -c "step-9 was trained\|step-9 keeps" "$out/rh.log")" = 6 ] && ! grep -q "was trained with optimizer\|moments" "$out/rb.log" ||
  { echo "FAIL: resume warnings for unchanged settings"; grep "was trained" "$out/rh.log" "$out/rb.log"; exit 1; }
echo "ok a resume with changed AdamW settings, Adam for AdamW, bf16 moments or seed (random tokens) says each"
# [[optimizer.param_groups]] at a resume: groups where the checkpoint had none, and a group's
# changed lr, are said (this run's apply); the same groups silent
source "$(dirname "$0")/args.sh" # without, fixtures
sed 's/lr = 1e-2/lr = 2e-2/' "$fixtures/param_groups/dense.toml" > "$out/g3.toml"
without model --lr
nolr=("${kept[@]}")
cp -r "$out/random" "$out/rg" && rm -rf "$out/rg/checkpoint/step-12" # (weights only)
g=("${nolr[@]}" --random-tokens --set vocab_size=300 --dump-folder "$out/rg" --checkpoint-interval 1)
"$titan" train "${g[@]}" --config "$fixtures/param_groups/dense.toml" --checkpoint.load_step 9 --stop-after-step 10 \
  > "$out/rg.log" 2>&1 || { cat "$out/rg.log"; exit 1; }
"$titan" train "${g[@]}" --config "$out/g3.toml" --stop-after-step 11 > "$out/rg3.log" 2>&1 ||
  { cat "$out/rg3.log"; exit 1; }
"$titan" train "${g[@]}" --config "$out/g3.toml" --stop-after-step 12 > "$out/rg4.log" 2>&1 ||
  { cat "$out/rg4.log"; exit 1; }
grep -q "step-9 was trained with 1 parameter group (\[optimizer\]'s); this run has 4, which apply from here" \
  "$out/rg.log" &&
  grep -q "step-10 was trained with group 1 ('norm') lr = 0.01; this run sets 0.02, which apply" \
  "$out/rg3.log" && ! grep -q "was trained with .*group" "$out/rg4.log" ||
  { echo "FAIL param groups at a resume"; cat "$out/rg.log" "$out/rg3.log" "$out/rg4.log"; exit 1; }
echo "ok a resume with other parameter groups says so; the same groups are silent"
# another attn_mask_type at a resume: allowed and said (attention and packing change from
# there); the same one silent (rh above)
cp -r "$out/random" "$out/rm"
"$titan" train "${model[@]}" --random-tokens --set vocab_size=300 --dump-folder "$out/rm" \
  --checkpoint-interval 3 --checkpoint.load_step 9 --stop-after-step 10 \
  --model.attn_mask_type block_causal > "$out/rm.log" 2>&1 || { cat "$out/rm.log"; exit 1; }
grep -q 'step-9 was trained with model.attn_mask_type = "causal"; this run uses "block_causal": allowed' \
  "$out/rm.log" && ! grep -q "attn_mask_type" "$out/rh.log" ||
  { echo "FAIL a resume with another attn_mask_type not said (or an unchanged one said)"; cat "$out/rm.log"; exit 1; }
echo "ok a resume with another attn_mask_type says so"
# an MoE resumed with another load balancing: said, with what becomes of the expert bias
moe=(--set n_layers=1 --set dim=32 --set n_heads=2 --set n_kv_heads=1 --set head_dim=16
     --set ffn_dim=64 --set vocab_size=100 --set num_experts=4 --set top_k=2 --set moe_inter_dim=16
     --random-tokens --seq-len 16 --batch 2 --peak-tflops 1 --log-freq 100 --dump-folder "$out/mb"
     --checkpoint-interval 2 --checkpoint.last_save_model_only=false)
"$titan" train "${moe[@]}" --steps 2 --model.moe_load_balance=bias > "$out/mb1.log" 2>&1 ||
  { cat "$out/mb1.log"; exit 1; }
"$titan" train "${moe[@]}" --steps 3 > "$out/mb2.log" 2>&1 || { cat "$out/mb2.log"; exit 1; }
grep -q 'step-2 was trained with model.moe_load_balance = "bias"; this run uses "none": the checkpoint.s learned expert bias no longer steers' "$out/mb2.log" ||
  { echo "FAIL an MoE resume with another balancing not said"; cat "$out/mb2.log"; exit 1; }
echo "ok an MoE resume with another load balancing says what becomes of the expert bias"
# the newest step damaged (a truncated shard): refused by name, and the refusal names the
# load_step that resumes from the step before it
rnd=(--random-tokens --set vocab_size=300 --steps 10 --checkpoint-interval 3
     --checkpoint.no_last_save_model_only --dump-folder "$out/trunc")
"$titan" train "${model[@]}" "${rnd[@]}" > /dev/null 2>&1 || { echo "FAIL trunc: training"; exit 1; }
truncate -s 5000 "$out/trunc/checkpoint/step-10/rank-00000.safetensors"
refused "a truncated newest shard" \
  "step-10/rank-00000.safetensors: .*out of bounds.*\(if step-10 is damaged, checkpoint.load_step = 9 resumes from the one before it\)" \
  "${rnd[@]}" --steps 12
