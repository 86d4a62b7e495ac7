#!/usr/bin/env bash
# Fine-tuning and resuming do what the user meant (issue 14):
#  - a checkpoint past training.steps is refused by name; one at training.steps loads and
#    trains no step;
#  - a load skips the random init (a line for every start-up phase says so);
#  - checkpoint.exclude_from_loading, load_only, enable_first_step_checkpoint and
#    create_seed_checkpoint (torchtitan's switches), each against an independent run;
#  - checkpoint.initial_load_in_hf loads model.hf_assets_path when initial_load_path is unset:
#    one HF folder supplies config.json, tokenizer and weights (the same losses as naming it
#    three times);
#  - checkpoints record their tokenizer: generate uses it from a run folder, and refuses a
#    changed or missing one, a tokenizer for a byte model, and a checkpoint without a record
#    whose vocabulary is not 256; a token shard of another tokenizer is refused by name.
set -euo pipefail
titan=$1; shared=$2; python=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
tok=$shared/data/test_tokenizer
printf '{"text": "%s"}\n' "The quick brown fox jumps over the lazy dog." "Pack my box with five \
dozen liquor jugs." "How vexingly quick daft zebras jump!" > "$out/docs.jsonl"
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --set vocab_size=2048)
run=(--batch 2 --seq-len 24 --lr 3e-3 --warmup 2 --seed 7 --peak-tflops 1 --log-freq 100
     --data "$out/docs.jsonl" --checkpoint.enable --sync-checkpoint)
fail() { echo "FAIL $*"; exit 1; }
field() { grep -o "\"$2\": [^,}]*" "$1" || true; }
t() { "$titan" train "$@"; }
from3() { mkdir -p "$out/$1/checkpoint" && cp -r "$out/a/checkpoint/step-3" "$out/$1/checkpoint/"; }

# ---- a checkpoint past / at training.steps ---------------------------------------------------
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 6 --dump-folder "$out/a" \
  --checkpoint-interval 3 --checkpoint.last_save_model_only false --metrics "$out/a.jsonl" \
  > "$out/a.log"
grep -q "initialising the weights" "$out/a.log" || fail "no line before the weight init"
grep -q "measuring the fp32 GEMM peak" "$out/a.log" && fail "a configured peak is not measured"
if t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 4 --dump-folder "$out/a" \
    > "$out/past.log" 2>&1; then fail "a checkpoint past training.steps was resumed"; fi
grep -q "$out/a/checkpoint/step-6 is past training.steps = 4" "$out/past.log" &&
  grep -q "use another job.dump_folder" "$out/past.log" || { cat "$out/past.log"; fail "message"; }
echo "ok a checkpoint past training.steps is refused, naming it and how to start afresh"
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 6 --dump-folder "$out/a" \
  --metrics "$out/at.jsonl" > "$out/at.log"
[ ! -s "$out/at.jsonl" ] && grep -q "step-6 is at training.steps = 6" "$out/at.log" ||
  { cat "$out/at.log"; fail "a checkpoint at training.steps"; }
# the load overwrites every weight: no init, a line for the load
grep -q "initialising the weights" "$out/at.log" && fail "weights initialised before a resume"
grep -q "resumed from $out/a/checkpoint/step-6" "$out/at.log" || fail "no resume line"
echo "ok a checkpoint at training.steps loads (no random init first) and trains no step"

# ---- exclude_from_loading ----------------------------------------------------------------
# everything but the model: the same as an initial load of step-3's weights (load_only: the
# runs from step 0 would save over step-3)
from3 x
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/x" \
  --checkpoint.load_only --metrics "$out/x.jsonl" \
  --checkpoint.exclude_from_loading "optimizer,lr_scheduler,dataloader,train_state" > "$out/x.log"
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/i" \
  --checkpoint.initial_load_path "$out/a/checkpoint/step-3" --metrics "$out/i.jsonl" > "$out/i.log"
grep -q "initialising the weights" "$out/i.log" && fail "weights initialised before an initial load"
[ "$(field "$out/x.jsonl" loss)" = "$(field "$out/i.jsonl" loss)" ] &&
  [ "$(field "$out/x.jsonl" step | head -1)" = '"step": 1' ] ||
  fail "resume without optimizer/lr_scheduler/dataloader/train_state != initial load"
grep -q "not loaded: optimizer lr_scheduler dataloader train_state" "$out/x.log" || fail "log"
# everything excluded: a fresh run (the random init runs again)
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/x" \
  --checkpoint.load_only --metrics "$out/xa.jsonl" --checkpoint.exclude_from_loading \
  "model,optimizer,lr_scheduler,dataloader,train_state" > "$out/xa.log"
grep -q "initialising the weights" "$out/xa.log" || fail "no init when the model is excluded"
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/f" \
  --metrics "$out/f.jsonl" > /dev/null
[ "$(field "$out/xa.jsonl" loss)" = "$(field "$out/f.jsonl" loss)" ] ||
  fail "a resume excluding every part != a fresh run"
# lr_scheduler alone: steps 4.. continue, the schedule starts again (step 4's lr = step 1's)
from3 xl
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 6 --dump-folder "$out/xl" \
  --metrics "$out/xl.jsonl" --checkpoint.exclude_from_loading lr_scheduler > /dev/null
[ "$(field "$out/xl.jsonl" step | head -1)" = '"step": 4' ] &&
  [ "$(field "$out/xl.jsonl" lr | head -1)" = "$(field "$out/a.jsonl" lr | head -1)" ] ||
  fail "exclude lr_scheduler: $(field "$out/xl.jsonl" lr | head -1)"
if t "${model[@]}" "${run[@]}" --steps 3 --checkpoint.exclude_from_loading optimiser \
    > "$out/bad.log" 2>&1; then fail "an unknown part was accepted"; fi
grep -q "'optimiser' is not a checkpoint part" "$out/bad.log" || fail "unknown part message"
echo "ok exclude_from_loading: model-only resume = initial load, all = fresh, lr_scheduler restarts"

# ---- load_only, enable_first_step_checkpoint, create_seed_checkpoint ------------------------
from3 l
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 6 --dump-folder "$out/l" \
  --checkpoint-interval 1 --checkpoint.load_only > "$out/l.log"
[ "$(ls "$out/l/checkpoint")" = "step-3" ] && grep -q "resumed from .*step-3" "$out/l.log" ||
  fail "load_only saved: $(ls "$out/l/checkpoint")"
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/s1" \
  --checkpoint-interval 100 --checkpoint.enable_first_step_checkpoint > /dev/null
[ "$(ls "$out/s1/checkpoint" | tr '\n' ' ')" = "step-1 step-3 " ] ||
  fail "first step checkpoint: $(ls "$out/s1/checkpoint")"
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/seed" \
  --checkpoint.create_seed_checkpoint --metrics "$out/seed0.jsonl" > "$out/seed.log"
[ "$(ls "$out/seed/checkpoint")" = "step-0" ] && [ ! -s "$out/seed0.jsonl" ] ||
  fail "seed checkpoint: $(ls "$out/seed/checkpoint")"
# a run from the seed trains exactly as a fresh run of the same seed
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/seed" \
  --checkpoint-interval 100 --metrics "$out/seed.jsonl" > "$out/seed2.log"
grep -q "loaded weights of .*step-0 (model only)" "$out/seed2.log" &&
  [ "$(field "$out/seed.jsonl" loss)" = "$(field "$out/f.jsonl" loss)" ] ||
  fail "the run from the seed checkpoint differs from a fresh run"
if t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 3 --dump-folder "$out/seed" \
    --checkpoint.create_seed_checkpoint > "$out/seed3.log" 2>&1; then
  fail "a seed checkpoint over existing steps"; fi
grep -q "already holds step-3" "$out/seed3.log" || { cat "$out/seed3.log"; fail "seed message"; }
if t "${model[@]}" "${run[@]}" --steps 3 --dump-folder "$out/seed4" \
    --checkpoint.create_seed_checkpoint --checkpoint.load_only > "$out/seed4.log" 2>&1; then
  fail "a seed checkpoint with load_only"; fi
grep -q "cannot go with checkpoint.load_only" "$out/seed4.log" || fail "seed + load_only message"
echo "ok load_only never saves, first step checkpoint, seed checkpoint = fresh init, exit"

# ---- one HF folder for a fine-tune ----------------------------------------------------------
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 2 --dump-folder "$out/base" \
  --out hf > /dev/null
hf=$out/base/hf
[ -f "$hf/config.json" ] && [ -f "$hf/tokenizer.json" ] || fail "the export is not a full folder"
# its config.json names the tokenizer's bos / eos / pad ids, where transformers' generate takes
# its stop token when the folder has no generation_config.json (test_tokenizer has none); so
# does `titan convert` of the run's checkpoint, from the ids the checkpoint records
"$titan" convert "$out/base/checkpoint" "$out/conv" --assets "$tok" > /dev/null ||
  fail "convert of the run's checkpoint"
# without --assets, convert copies the tokenizer the checkpoint records (as the run's own --out
# export does; the folder had no tokenizer for transformers)
"$titan" convert "$out/base/checkpoint" "$out/conv_rec" > "$out/conv_rec.log" 2>&1 &&
  cmp -s "$out/conv_rec/tokenizer.json" "$tok/tokenizer.json" &&
  grep -q "tokenizer files from .* (the run's tokenizer, recorded in the checkpoint" "$out/conv_rec.log" ||
  { cat "$out/conv_rec.log"; fail "convert without --assets: the run's tokenizer"; }
"$python" - "$hf" "$out/conv" <<'EOF' || fail "the export's token ids are not the tokenizer's"
import json, os, sys
from transformers import AutoConfig, AutoTokenizer, GenerationConfig
for d in sys.argv[1:]:
    cfg, tok = AutoConfig.from_pretrained(d), AutoTokenizer.from_pretrained(d)
    assert not os.path.exists(os.path.join(d, "generation_config.json"))
    for name in ("bos", "eos", "pad"):
        want, got = getattr(tok, name + "_token_id"), getattr(cfg, name + "_token_id")
        assert got == want, f"{d}: config.json {name}_token_id {got}, the tokenizer's {want}"
    eos = GenerationConfig.from_model_config(cfg).eos_token_id
    assert tok.eos_token_id is not None and eos == tok.eos_token_id, f"{d}: generate's eos {eos}"
m = os.path.join(os.path.dirname(sys.argv[1]), "checkpoint", "step-2", "metadata.json")
j = json.load(open(m))
j["train"]["tokenizer"]["eos_token_id"] = -3  # a recorded id that is none: refused by name
del j["crc32c"]  # an edit made on purpose (docs/checkpoints.md)
json.dump(j, open(m, "w"))
EOF
if "$titan" convert "$out/base/checkpoint" "$out/conv2" > /dev/null 2> "$out/conv2.err"; then
  fail "convert took a negative eos_token_id"; fi
grep -q 'step-2/metadata.json: "train"."tokenizer".eos_token_id is not a token id' \
  "$out/conv2.err" || { cat "$out/conv2.err"; fail "bad token id message"; }
t "${run[@]}" --steps 3 --dump-folder "$out/ft3" --model.config_path "$hf" \
  --checkpoint.initial_load_path "$hf" --tokenizer "$hf" --metrics "$out/ft3.jsonl" > /dev/null
t "${run[@]}" --steps 3 --dump-folder "$out/ft1" --checkpoint.initial_load_in_hf \
  --tokenizer "$hf" --metrics "$out/ft1.jsonl" > "$out/ft1.log"
grep -q "initial weights from $hf" "$out/ft1.log" && [ -s "$out/ft1.jsonl" ] &&
  [ "$(field "$out/ft1.jsonl" loss)" = "$(field "$out/ft3.jsonl" loss)" ] ||
  { cat "$out/ft1.log"; fail "hf_assets_path alone != config_path + initial_load_path"; }
# --print-config names that config.json (its printed flavor would otherwise build the model)
# (into a file: grep -q on a pipe may exit before titan's last write, whose SIGPIPE fails the
# pipeline under pipefail)
t "${run[@]}" --checkpoint.initial_load_in_hf --tokenizer "$hf" --print-config > "$out/pc.toml"
grep -q "^config_path = \"$hf\"" "$out/pc.toml" ||
  fail "print-config does not name the folder's config.json"
if t "${run[@]}" --steps 3 --checkpoint.initial_load_in_hf > "$out/nohf.log" 2>&1
then fail "initial_load_in_hf without a folder"; fi
grep -q "checkpoint.initial_load_in_hf.*names no folder to load" "$out/nohf.log" ||
  { cat "$out/nohf.log"; fail "message"; }
echo "ok initial_load_in_hf: hf_assets_path supplies config.json, tokenizer and weights"

# ---- the tokenizer a checkpoint records -----------------------------------------------------
g=(generate --prompt "The quick brown" --max-new-tokens 6 --temperature 0 --ids)
"$titan" "${g[@]}" --model "$out/a/checkpoint/step-6" --tokenizer "$tok" > "$out/g1.txt" \
  2> "$out/g1.err"
"$titan" "${g[@]}" --model "$out/a" > "$out/g2.txt" 2> "$out/g2.err" ||
  { cat "$out/g2.err"; fail "generate from a run folder"; }
cmp -s "$out/g1.txt" "$out/g2.txt" && [ "$(grep -o 'prompt: [0-9]* tokens' "$out/g2.err")" = \
  "$(grep -o 'prompt: [0-9]* tokens' "$out/g1.err")" ] || fail "the recorded tokenizer not used"
"$python" - "$out/a/checkpoint/step-6/metadata.json" "$tok" <<'EOF' || fail "record"
import json, os, sys
t = json.load(open(sys.argv[1]))["train"]["tokenizer"]
h = 0xcbf29ce484222325  # FNV-1a 64
for c in open(os.path.join(sys.argv[2], "tokenizer.json"), "rb").read():
    h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
want = {"path": os.path.realpath(sys.argv[2]), "tokenizer_json_fnv1a64": "%016x" % h}
from transformers import AutoTokenizer  # and its bos / eos / pad ids, for titan convert
tk = AutoTokenizer.from_pretrained(sys.argv[2])
for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
    if getattr(tk, k) is not None:
        want[k] = getattr(tk, k)
assert t == want, (t, want)
EOF
cp -r "$tok" "$out/tk"
t "${model[@]}" "${run[@]}" --tokenizer "$out/tk" --steps 1 --dump-folder "$out/r" > /dev/null
echo " " >> "$out/tk/tokenizer.json"
if "$titan" "${g[@]}" --model "$out/r" > /dev/null 2> "$out/g3.err"; then fail "changed"; fi
grep -q "trained with the tokenizer $out/tk, whose tokenizer.json has changed" "$out/g3.err" ||
  { cat "$out/g3.err"; fail "changed tokenizer message"; }
if "$titan" "${g[@]}" --model "$out/a" --tokenizer "$out/tk" > /dev/null 2> "$out/g4.err"; then
  fail "another --tokenizer"; fi
grep -q "$out/tk/tokenizer.json is another" "$out/g4.err" || fail "another tokenizer message"
rm -r "$out/tk"
if "$titan" "${g[@]}" --model "$out/r" > /dev/null 2> "$out/g5.err"; then fail "gone"; fi
grep -q "trained with the tokenizer $out/tk, which is gone" "$out/g5.err" || fail "gone message"
"$titan" convert "$out/r/checkpoint" "$out/conv_gone" > /dev/null 2> "$out/conv_gone.err" &&
  [ ! -e "$out/conv_gone/tokenizer.json" ] &&
  grep -q "the run's tokenizer $out/tk is gone or its tokenizer.json changed" "$out/conv_gone.err" ||
  { cat "$out/conv_gone.err"; fail "convert with the run's tokenizer gone"; }
"$python" - "$out/r/checkpoint/step-1/metadata.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
del m["train"]["tokenizer"]  # a checkpoint written before the record
del m["crc32c"]
json.dump(m, open(sys.argv[1], "w"))
EOF
if "$titan" "${g[@]}" --model "$out/r" > /dev/null 2> "$out/g6.err"; then fail "no record"; fi
grep -q "does not record the tokenizer .* vocabulary is 2048, not 256" "$out/g6.err" ||
  { cat "$out/g6.err"; fail "no record message"; }
head -c 3000 "$shared/data/tinyshakespeare/input.txt" > "$out/bytes.txt"
t "${model[@]}" "${run[@]}" --data "$out/bytes.txt" --steps 1 --dump-folder "$out/b" > /dev/null
if "$titan" "${g[@]}" --model "$out/b" --tokenizer "$tok" > /dev/null 2> "$out/g7.err"; then
  fail "a tokenizer for a byte model"; fi
grep -q "trained on bytes" "$out/g7.err" || fail "bytes message"
"$titan" "${g[@]}" --model "$out/b" > /dev/null 2>&1 || fail "a byte model without a tokenizer"
echo "ok generate uses the recorded tokenizer and refuses a changed, missing or other one"
cp -r "$tok" "$out/tk2" && echo " " >> "$out/tk2/tokenizer.json"
"$titan" tokenize --data "$out/docs.jsonl" --tokenizer "$tok" --out "$out/shards" > /dev/null
if t "${model[@]}" "${run[@]}" --data "$out/shards" --tokenizer "$out/tk2" --steps 1 \
    --dump-folder "$out/sh" > "$out/sh.log" 2>&1; then fail "a shard of another tokenizer"; fi
grep -q "shard-00000.tok: shard was written with the tokenizer $(realpath "$tok")" "$out/sh.log" ||
  { cat "$out/sh.log"; fail "shard message"; }
echo "ok a token shard written with another tokenizer is refused by name"
# token shards trained on without --tokenizer: the checkpoint records the shards' tokenizer
# (not "bytes"), so generate decodes with it unasked
t "${model[@]}" "${run[@]}" --data "$out/shards" --steps 1 --dump-folder "$out/sn" > /dev/null
grep -q "\"tokenizer\": {\"path\": \"$(realpath "$tok")\"" <("$python" -c "
import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['train']))" \
  "$out/sn/checkpoint/step-1/metadata.json") || fail "shards without a tokenizer: record"
"$titan" "${g[@]}" --model "$out/sn" > "$out/g8.out" 2> "$out/g8.err" ||
  { cat "$out/g8.err"; fail "generate from a shard-trained checkpoint"; }
echo "ok token shards without --tokenizer record their tokenizer; generate uses it"
# a NaN in a checkpoint's weights is refused at load, naming the weight (not steps later as a
# non-finite gradient). The NaN is written as a diverged run would have saved it: with the
# tensor's CRC-32C recomputed (tensorboard's crc32c, an independent implementation) and the
# shard's identity in metadata.json (its size, its header's CRC-32C) with it, so the weight
# check, not a checksum, is what refuses it.
mkdir -p "$out/nan/checkpoint" && cp -r "$out/a/checkpoint/step-3" "$out/nan/checkpoint/"
"$python" - "$out/nan/checkpoint/step-3/rank-00000.safetensors" <<'EOF2'
import json, struct, sys
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
lo, hi = h["model"]["data_offsets"]
off = 8 + n + lo + 4 * 100  # the 101st weight: tok_embeddings
old = h["__metadata__"]["model.crc32c"]
assert old == "%08x" % crc32c(bytes(b[8 + n + lo:8 + n + hi])), "titan's CRC"
b[off:off + 4] = struct.pack("<f", float("nan"))
new = "%08x" % crc32c(bytes(b[8 + n + lo:8 + n + hi]))
hdr = bytes(b[8:8 + n]).replace(('"model.crc32c":"%s"' % old).encode(),
                                ('"model.crc32c":"%s"' % new).encode())
assert len(hdr) == n and hdr != bytes(b[8:8 + n])
b[8:8 + n] = hdr
open(p, "wb").write(b)
meta = p.rsplit("/", 1)[0] + "/metadata.json"
m = json.load(open(meta))
m["shard_headers"]["rank-00000.safetensors"] = {"bytes": len(b),
                                                "header_crc32c": "%08x" % crc32c(bytes(b[:8 + n]))}
del m["crc32c"]
json.dump(m, open(meta, "w"))
EOF2
if t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 6 --dump-folder "$out/nan" \
    > "$out/nan.log" 2>&1; then fail "a NaN weight was resumed"; fi
grep -q "nan/checkpoint/step-3: weight tok_embeddings.weight holds a NaN or an infinity" \
  "$out/nan.log" || { cat "$out/nan.log"; fail "NaN weight message"; }
echo "ok a NaN weight in a checkpoint is refused at load, named"
# generate: --set / --flavor describe a bare safetensors file; with a model that records its
# arguments they may only agree with them (refused where they differ, not silently dropped)
if "$titan" "${g[@]}" --model "$out/a" --set dim=32 > /dev/null 2> "$out/g9.err"; then
  fail "generate --set dim=32 with a dim-64 checkpoint"; fi
grep -q "records its own, which they would change" "$out/g9.err" ||
  { cat "$out/g9.err"; fail "--set message"; }
"$titan" "${g[@]}" --model "$out/a" --set dim=64 > /dev/null 2>&1 || fail "an agreeing --set"
echo "ok generate refuses --set / --flavor that differ from what the model records"
# checkpoint.export_dtype = bfloat16 (torchtitan): the last, weights-only save is stored as BF16
# (resumable saves stay F32), and a run from it starts exactly as one from the bf16 HF export
# of the same weights (another loader: HF names, per-tensor conversion)
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 4 --dump-folder "$out/e16" \
  --checkpoint-interval 2 --checkpoint.export_dtype bfloat16 --out "$out/e16/hf" > /dev/null
"$python" - "$out/e16/checkpoint" <<'EOF2' || fail "export_dtype: stored dtypes"
import json, struct, sys
def dtypes(p):
    b = open(p, "rb").read()
    h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
    return {k: v["dtype"] for k, v in h.items() if k != "__metadata__"}
last, mid = dtypes(sys.argv[1] + "/step-4/rank-00000.safetensors"), dtypes(sys.argv[1] + "/step-2/rank-00000.safetensors")
assert set(last.values()) == {"BF16"}, last
assert set(mid.values()) == {"F32"}, mid
EOF2
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 6 --dump-folder "$out/e16" \
  --checkpoint.load_only --metrics "$out/e16a.jsonl" > "$out/e16a.log"
grep -q "loaded weights of .*e16/checkpoint/step-4 (model only)" "$out/e16a.log" ||
  { cat "$out/e16a.log"; fail "export_dtype: no weights-only start"; }
t "${model[@]}" "${run[@]}" --tokenizer "$tok" --steps 2 --dump-folder "$out/e16b" \
  --checkpoint.initial_load_path "$out/e16/hf" --metrics "$out/e16b.jsonl" > /dev/null
[ -n "$(field "$out/e16a.jsonl" loss | head -1)" ] &&
  [ "$(field "$out/e16a.jsonl" loss | head -1)" = "$(field "$out/e16b.jsonl" loss | head -1)" ] ||
  fail "export_dtype: the bf16 last save and the bf16 HF export start differently"
echo "ok export_dtype bfloat16: the last weights-only save is BF16 and loads as the bf16 export"
# --chat with one message object (not a list) says so, instead of "no such file"
if "$titan" generate --model "$out/a" --tokenizer "$tok" --max-new-tokens 2 \
    --chat '{"role": "user", "content": "hi"}' > /dev/null 2> "$out/g10.err"; then
  fail "--chat with one object"; fi
grep -q "takes a JSON list of messages" "$out/g10.err" || { cat "$out/g10.err"; fail "--chat message"; }
echo "ok --chat with a single message object is refused with what it takes"
# an initial load from a titan checkpoint of an MoE trained with the expert bias restores the
# bias, as a resume and generate do (it restarted from zeros); an HF folder has none (zeros)
moe=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
     --set ffn_dim=128 --set vocab_size=300 --set num_experts=4 --set top_k=2
     --set moe_inter_dim=32 --model.moe_load_balance bias --random-tokens --batch 2
     --seq-len 24 --peak-tflops 1 --log-freq 100 --sync-checkpoint)
t "${moe[@]}" --model.moe_bias_update_rate 0.01 --steps 3 --dump-folder "$out/mb" \
  --checkpoint.enable > /dev/null
t "${moe[@]}" --model.moe_bias_update_rate 1e-6 --steps 1 --dump-folder "$out/mbi" \
  --checkpoint.enable --last-save-full --checkpoint.initial_load_path "$out/mb/checkpoint/step-3" \
  > "$out/mbi.log"
grep -q "initial weights and MoE expert bias from $out/mb/checkpoint/step-3" "$out/mbi.log" ||
  { cat "$out/mbi.log"; fail "the initial load does not say it loaded the expert bias"; }
bias_near() { # A B TOL: metadata.json files whose train.expert_bias differ by at most TOL
  "$python" -c 'import json, sys
a, b = (json.load(open(f))["train"]["expert_bias"] for f in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b))
sys.exit(0 if len(a) == len(b) and any(a) and d <= float(sys.argv[3]) else f"bias off by {d}: {a} vs {b}")' "$@"
}
bias_near "$out/mb/checkpoint/step-3/metadata.json" "$out/mbi/checkpoint/step-1/metadata.json" 1e-5 ||
  fail "initial load: the expert bias is not the checkpoint's (plus one update at rate 1e-6)"
echo "ok an initial load from an MoE checkpoint restores the expert bias"
