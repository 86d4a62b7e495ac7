#!/usr/bin/env bash
# Bad job inputs: each is a one-line error naming the culprit, exit status 1, and no step
# runs (nothing printed as "step:").
set -uo pipefail
titan=$1; shared=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
mkdir -p "$out/nocfg"
echo "some text" > "$out/t.txt"
base=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --data "$out/t.txt" --steps 1 --batch 1 --seq-len 8 --peak-tflops 1
      --dump-folder "$out/run")
fail=0
expect() { # description, regex, args...
  local what=$1 re=$2; shift 2
  "$titan" "${base[@]}" "$@" > "$out/o" 2> "$out/e"; local rc=$?
  # one line: the error (overriding a flag of base warns that it is set twice: not counted)
  local lines; lines=$(grep -v "is set twice on the command line" "$out/e" | grep -c .)
  if [ $rc -ne 1 ] || ! grep -qE "$re" "$out/e" || grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/o" || [ "$lines" -ne 1 ]; then
    echo "FAIL $what (rc $rc):"; cat "$out/e"; fail=1
  else
    echo "ok   $what: $(grep -v "is set twice on the command line" "$out/e")"
  fi
}
expect "missing dataset" "/nonexistent.txt: No such file" --data /nonexistent.txt
expect "missing assets (tokenizer)" "model.hf_assets_path: /nonexistent/tokenizer.json: No such file" \
  --tokenizer /nonexistent
expect "HF folder without config.json" "nocfg/config.json: no such file" \
  --model.config_path "$out/nocfg"
expect "initial load from a folder that is no model" "nocfg: not a model" \
  --checkpoint.enable --checkpoint.initial_load_path "$out/nocfg"
mkdir -p "$out/dcp/step-20" && touch "$out/dcp/step-20/.metadata" "$out/dcp/step-20/__0_0.distcp"
expect "initial load from torchtitan's DCP step folder" \
  "dcp/step-20: a torchtitan \(DCP\) checkpoint .*convert_to_hf.py" \
  --checkpoint.enable --checkpoint.initial_load_path "$out/dcp/step-20"
expect "initial load from torchtitan's DCP checkpoint folder" \
  "dcp/step-20: a torchtitan \(DCP\) checkpoint" \
  --checkpoint.enable --checkpoint.initial_load_path "$out/dcp"
expect "tokenizer vocab larger than the model's" "the tokenizer has 151669 ids but the model's vocab_size is 2048" \
  --tokenizer "$shared/data/qwen3_tokenizer"
expect "global batch that does not divide" "global_batch_size: 3 is not a multiple" \
  --training.global_batch_size 3 --batch 2
# found before the first step (before the model is built), not at the first save / validation
expect "checkpoint folder under a regular file" \
  "checkpoint.folder: .*/t.txt/run/checkpoint: cannot be created: .*/t.txt is not a folder" \
  --checkpoint.enable --dump-folder "$out/t.txt/run"
# [[optimizer.param_groups]] that do not cover the model: before it is built (train_preflight)
pg() { printf '[[optimizer.param_groups]]\npattern = "%s"\noptimizer_name = "AdamW"\noptimizer_kwargs = {lr = 1e-3}\n' "$@"; }
pg nomatch '.*' > "$out/pg1.toml"
pg norm > "$out/pg2.toml"
pg '.*' 'norm' > "$out/pg3.toml"
expect "a param group matching nothing" \
  "pg1.toml:1:1: optimizer param_groups pattern 'nomatch' matched no parameters" --config "$out/pg1.toml"
expect "a parameter in no param group" \
  "pg2.toml: \\[\\[optimizer.param_groups\\]\\]: no pattern matches parameter tok_embeddings.weight: every" \
  --config "$out/pg2.toml"
expect "a param group after a catch-all" \
  "pg3.toml:5:1: optimizer param_groups pattern 'norm' matched no parameters \(of those earlier patterns left" \
  --config "$out/pg3.toml"
# torchtitan strips it before its "cannot be empty" ("" said "out of memory", " " was a folder)
expect "empty checkpoint folder" "checkpoint.folder: cannot be empty" \
  --checkpoint.enable --checkpoint.folder ""
expect "whitespace-only checkpoint folder" "checkpoint.folder: cannot be empty" \
  --checkpoint.enable --checkpoint.folder " "
expect "TensorBoard folder under a regular file" "metrics.save_tb_folder: .*t.txt is not a folder" \
  --metrics.enable_tensorboard --metrics.save_tb_folder "$out/t.txt/tb"
expect "metrics file under a regular file" "metrics.save_jsonl_file: .*t.txt is not a folder" \
  --metrics "$out/t.txt/m.jsonl"
expect "metrics file that is a folder" "metrics.save_jsonl_file: .*/nocfg is a folder, a file is expected" \
  --metrics "$out/nocfg"
expect "HF export folder under a regular file" "checkpoint.hf_export_folder: .*t.txt is not a folder" \
  --out "$out/t.txt/hf"
expect "missing validation set" "validation.dataset_path: /nonexistent/val.txt: No such file" \
  --validation.enable --validation.dataset_path /nonexistent/val.txt
expect "dataset glob matching nothing" "training.dataset_path: '$out/none\*.txt' matches no file" \
  --data "$out/none*.txt"
# compressed or binary files are refused, not trained on as text
printf '{"text": "hello"}\n' | gzip > "$out/c4.json.gz"
expect "gzip-compressed dataset" "c4.json.gz: a gzip-compressed file, not plain text.*gunzip" \
  --data "$out/c4.json.gz"
printf 'text\0with a NUL' > "$out/bin.txt"
expect "binary dataset" "bin.txt: binary data \\(a NUL byte at offset 4\\).*pass --format text \\(training.dataset_format = \"text\"\\) to read it as text" --data "$out/bin.txt"
printf 'TITANTOK\1\0\0\0' > "$out/shard.tok"
expect "token shard read as text" "shard.tok: a titan token shard, not plain text.*dataset_format" \
  --data "$out/shard.tok" --training.dataset_format text
TITAN_MEM_AVAILABLE=1048576 expect "more memory than available" \
  "memory: this run needs about [0-9.]+ MiB .*but 1.0 MiB is available.*--force" \
  --peak-tflops 1
# what would fit is counted as the need is: more ranks on more machines of this size, as many
# on each as now (one: the run's process), not more ranks sharing this machine's budget
TITAN_MEM_AVAILABLE=1000000000 "$titan" train --flavor debugmodel --random-tokens --peak-tflops 1 \
  --job.dump_folder "$out/mm" > "$out/mm.log" 2>&1 && { cat "$out/mm.log"; echo "FAIL: 6 GiB in 1 GiB"; exit 1; }
grep -qE "memory: .*; 2 ranks with both, 1 a machine as now: [0-9.]+ MiB per rank" "$out/mm.log" ||
  { cat "$out/mm.log"; echo "FAIL: the ranks' alternative not per machine"; exit 1; }
# checkpoint.initial_load_path turns checkpointing on, from the alias or the field
expect "initial load path (field, no checkpoint.enable)" "nocfg: not a model" \
  --checkpoint.initial_load_path "$out/nocfg"
expect "initial load path (alias=value)" "nocfg: not a model" --initial-load-path="$out/nocfg"
expect "initial load path with checkpoint.enable = false" "needs checkpoint.enable = true" \
  --checkpoint.enable=false --initial-load-path "$out/nocfg"
# settings that would have no effect train, each with a warning naming it
warned() { # description, regex, args...
  local what=$1 re=$2; shift 2
  if "$titan" "${base[@]}" "$@" > "$out/o" 2> "$out/e" && grep -qE "^\[titan warn\] .*$re" "$out/e"
  then echo "ok   $what: $(grep -E "$re" "$out/e")"; else echo "FAIL $what:"; cat "$out/e"; fail=1; fi
}
warned "warmup longer than the run" "Warmup steps \(5\) exceed total steps \(1\)" --warmup 5
warned "warmup + decay longer than the run" \
  "Warmup \(2\) \+ decay \(2\) steps exceed total steps \(3\)\. Adjusting decay steps to 1\." \
  --steps 3 --warmup 2 --lr_scheduler.decay_ratio 0.6
warned "profile_freq above the steps" "profile_freq = 10 is above training.steps = 1" \
  --profiling.enable_profiling --profiling.profile_freq 10 --dump-folder "$out/runp"
warned "selective AC that checkpoints no block" "checkpoints no block of 1" \
  --activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option 2
warned "top_k on a dense model" "top_k / moe_inter_dim / norm_topk_prob have no effect" --set top_k=2
warned "aux-loss weight without the aux loss" "router_aux_loss_coef has no effect" \
  --model.router_aux_loss_coef 0.1
warned "bias rate without the expert bias" "moe_bias_update_rate has no effect" \
  --model.moe_bias_update_rate 0.01
# a config.json's fields titan does not read, each warned about where they would matter: HF's
# switch for the aux loss, the init's standard deviation
moe_json='"architectures":["Qwen3MoeForCausalLM"],"hidden_size":64,"num_hidden_layers":1,
"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":96,
"vocab_size":128,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":32'
printf '{%s,"output_router_logits":true,"initializer_range":0.5}\n' "$moe_json" > "$out/orl.json"
"$titan" inspect "$out/orl.json" > "$out/o" 2> "$out/e" || { echo "FAIL inspect orl.json"; cat "$out/e"; fail=1; }
for re in "output_router_logits = true: Hugging Face's training adds router_aux_loss_coef" \
          "initializer_range = 0.5 is not read"; do
  if grep -qE "^\[titan warn\] .*$re" "$out/e"; then echo "ok   config.json: $re"
  else echo "FAIL config.json warning '$re':"; cat "$out/e"; fail=1; fi
done
printf '{%s,"output_router_logits":false,"initializer_range":0.02}\n' "$moe_json" > "$out/orl0.json"
"$titan" inspect "$out/orl0.json" > "$out/o" 2> "$out/e" && ! grep -q "warn" "$out/e" ||
  { echo "FAIL: config.json defaults warned about"; cat "$out/e"; fail=1; }
# the memory knob in bytes: anything else was ignored without a word
TITAN_MEM_AVAILABLE=64GiB warned "TITAN_MEM_AVAILABLE not in bytes" \
  "TITAN_MEM_AVAILABLE='64GiB' is not a byte count"
# an empty first document with a tokenizer (no ids to copy: UBSan caught a NULL memcpy here)
printf '{"text": ""}\n{"text": "hello there"}\n' > "$out/emptyfirst.jsonl"
if "$titan" "${base[@]}" --data "$out/emptyfirst.jsonl" --tokenizer "$shared/data/test_tokenizer" \
    > "$out/o" 2>&1; then echo "ok   an empty first document trains"
else echo "FAIL an empty first document:"; cat "$out/o"; fail=1; fi
# --force (training.ignore_memory_check) starts anyway
if TITAN_MEM_AVAILABLE=1000000 "$titan" "${base[@]}" --force > "$out/o" 2>&1 &&
   grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/o"; then
  echo "ok   --force trains past the memory check"
else
  echo "FAIL --force:"; cat "$out/o"; fail=1
fi
# a one-document file read through ~1000 epochs: the restarts said at epochs 0-3 and powers of
# two (a line an epoch flooded the log), not one a pass
printf '{"text": "ab"}\n' > "$out/tiny.jsonl"
n=$("$titan" data --data "$out/tiny.jsonl" --seq-len 64 --batches 20 --vocab-size 300 2>&1 >/dev/null |
    grep -c "exhausted after 1 documents")
if [ "$n" -ge 4 ] && [ "$n" -le 16 ]; then echo "ok   epoch restarts of a tiny file: $n lines"
else echo "FAIL epoch restarts of a tiny file: $n log lines"; fail=1; fi
# a malformed line read through many epochs: logged and counted in the first pass only (each
# pass had logged it again and added it to the count)
printf '{"text": "ab"}\n{"text": 1}\n{"text": "cd"}\n' > "$out/tinybad.jsonl"
"$titan" data --data "$out/tinybad.jsonl" --seq-len 64 --batches 20 --vocab-size 300 \
  --skip-bad-lines > /dev/null 2> "$out/o"
n=$(grep -c 'tinybad.jsonl:2: field "text" is not a string; skipped' "$out/o")
if [ "$n" = 1 ] && grep -q "exhausted after 3 documents (epoch 0) (1 malformed lines skipped" "$out/o"
then echo "ok   a skipped line is logged and counted once, not every epoch"
else echo "FAIL a skipped line over epochs ($n log lines):"; head -5 "$out/o"; fail=1; fi
# every line malformed: tokenize fails with no documents and leaves no shard (a shard of
# skipped slots alone had been committed, and a second try refused the folder)
printf '{"text": 1}\n{"x": "a"}\n' > "$out/allbad.jsonl"
if "$titan" tokenize --data "$out/allbad.jsonl" --tokenizer "$shared/data/test_tokenizer" \
    --out "$out/allbad_tok" --skip-bad-lines > "$out/o" 2>&1; then
  echo "FAIL tokenize of an all-bad file succeeded"; fail=1
elif grep -q "no documents" "$out/o" && [ -z "$(ls "$out/allbad_tok" 2>/dev/null)" ]; then
  echo "ok   tokenize of an all-bad file: no documents, no shard left"
else echo "FAIL tokenize of an all-bad file:"; ls "$out/allbad_tok"; cat "$out/o"; fail=1; fi
# a validation set's malformed line is logged by the first validation only (each validation
# opened the set afresh and logged it again)
for i in $(seq 30); do printf '{"text": "validation line %d of the set"}\n' "$i"; done > "$out/v.jsonl"
sed -i '5s/.*/{"text": 5}/' "$out/v.jsonl"
"$titan" "${base[@]}" --steps 3 --validation.enable --validation.dataset_path "$out/v.jsonl" \
  --validation.freq 1 --validation.seq_len 8 --skip-bad-lines > "$out/o" 2>&1
n=$(grep -c 'v.jsonl:5: field "text" is not a string; skipped' "$out/o")
if [ "$n" = 1 ]; then echo "ok   a validation set's bad line is logged once over 3 validations"
else echo "FAIL a validation set's bad line logged $n times:"; tail -5 "$out/o"; fail=1; fi
# a working directory titan cannot write (the default dump folder "."): the error names the
# file, the folder and where "." is (it had named only "."); as nobody (root writes anywhere)
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
  chmod 755 "$out"; mkdir -p "$out/ro"; cp "$titan" "$out/titan"; chmod 755 "$out/titan"
  chmod 555 "$out/ro"
  m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
     --set ffn_dim=128 --set vocab_size=300 --random-tokens --steps 1 --batch 1 --seq-len 8
     --peak-tflops 1)
  (cd "$out/ro" && setpriv --reuid=65534 --regid=65534 --clear-groups "$out/titan" "${m[@]}") \
    > "$out/o" 2>&1
  (cd "$out/ro" && setpriv --reuid=65534 --regid=65534 --clear-groups "$out/titan" "${m[@]}" \
    --dump-folder run/a) > "$out/o2" 2>&1
  if grep -q "titan: error: metrics.save_report_file: report.html: folder . (the working \
directory, $out/ro) cannot be written: Permission denied" "$out/o" &&
     grep -q "titan: error: metrics.save_report_file: run/a/report.html: folder run/a cannot be \
created: . (the working directory, $out/ro) cannot be written: Permission denied" "$out/o2"; then
    echo "ok   an unwritable working directory: named with the file and the folder"
  else echo "FAIL an unwritable working directory:"; cat "$out/o" "$out/o2"; fail=1; fi
else echo "skip an unwritable working directory (needs root and setpriv)"; fi
exit $fail
