# Bitwise determinism of whole training runs (and of full activation checkpointing).
add_test(NAME train_determinism
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/determinism.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt)
set_tests_properties(train_determinism PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)

# `titan train --out` writes a Hugging Face folder that transformers loads cleanly. Each run
# has its own dump folder: the two run at once, and one folder's config.toml and report page
# would be two runs' (the run lock refuses the second).
foreach(tie 0 1)
  set(dir ${CMAKE_BINARY_DIR}/export_tie${tie})
  add_test(NAME train_export_tie${tie}
    COMMAND $<TARGET_FILE:titan> train --flavor debugmodel --set n_layers=2 --set dim=64
            --set n_heads=4 --set n_kv_heads=2 --set head_dim=32 --set ffn_dim=128
            --set tie_embeddings=${tie} --data ${TITAN_SHARED}/data/tinyshakespeare/input.txt
            --steps 30 --batch 4 --seq-len 64 --lr 3e-3 --warmup 5 --peak-tflops 1
            --log-freq 10 --dump-folder ${dir}_run --metrics ${dir}/metrics.jsonl --out ${dir})
  set_tests_properties(train_export_tie${tie} PROPERTIES FIXTURES_SETUP export_tie${tie}
                       ENVIRONMENT "OMP_NUM_THREADS=2")
  add_test(NAME hf_loads_export_tie${tie}
    COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_hf_export.py ${dir}
            ${dir}/metrics.jsonl ${TITAN_SHARED}/data/tinyshakespeare/input.txt)
  set_tests_properties(hf_loads_export_tie${tie} PROPERTIES FIXTURES_REQUIRED export_tie${tie})
endforeach()

# Exact resume from training checkpoints (bitwise-identical losses), pruning, refusals.
add_test(NAME train_resume
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/resume.sh $<TARGET_FILE:titan> ${TITAN_SHARED})
set_tests_properties(train_resume PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)

# A resume on a dataset that grew after the checkpoint (a JSONL file, a text file, a glob of
# token-shard folders) continues at the saved position: steps 4..6 bitwise a straight run's over
# the grown data; a rewrite inside what was read, a shrink, another field, a folder a tokenize
# still writes: refused by name. With an mpirun, the JSONL case on 2 data-parallel ranks too.
add_test(NAME train_resume_grown
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/resume_grown.sh $<TARGET_FILE:titan> ${TITAN_SHARED}
          "$<$<AND:$<TARGET_EXISTS:MPI::MPI_C>,$<BOOL:${TITAN_MPIRUN}>>:${TITAN_MPIRUN}>")
set_tests_properties(train_resume_grown PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# SIGKILL during checkpoint writes: the newest complete checkpoint always loads.
add_test(NAME checkpoint_kill
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_kill.sh $<TARGET_FILE:titan>)
set_tests_properties(checkpoint_kill PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# TensorBoard events (TensorBoard's reader), metrics.jsonl, validation loss against
# transformers on the exported model; divergence stops with its step, microbatch and
# parameter named and the last checkpoint intact.
add_test(NAME train_outputs
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/train_outputs.sh $<TARGET_FILE:titan>
          ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt)
set_tests_properties(train_outputs PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)

# End to end: an HF folder saved by transformers -> titan train (config_path +
# initial_load_path) -> HF export -> transformers; losses and weights equal PyTorch's
# (reference/check_finetune_e2e.py; MODE selects what both sides train with).
function(titan_finetune_test name mode)
  add_test(NAME ${name}
    COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_finetune_e2e.py
            $<TARGET_FILE:titan> ${TITAN_SHARED}/data/tinyshakespeare/input.txt
            ${CMAKE_BINARY_DIR}/${name} ${mode})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)
endfunction()
# AdamW as torchtitan's default
titan_finetune_test(finetune_from_hf_e2e "")
# [[optimizer.param_groups]] against the optimizers torchtitan 0.3 builds from them (a group
# per pattern, AdamW and Adam, torch's defaults for kwargs not given)
titan_finetune_test(finetune_param_groups groups)
# the same for a Qwen3MoeForCausalLM with torchtitan's MoE groups (the routers with Adam, the
# experts a group of their own): titan's MoE parameter names against HF's, through PyTorch
titan_finetune_test(finetune_moe_param_groups moe_groups)
# optimizer.implementation = "fused_opt_states_bf16" (AdamW's moments in bf16) against
# PyTorch's AdamW with its moments rounded to bf16 after every step
titan_finetune_test(finetune_adam_bf16_states bf16_states)
# optimizer.name = "Adam" (its weight_decay coupled, an L2 penalty) against torch.optim.Adam
titan_finetune_test(finetune_adam adam)
# torchtitan 0.3's DistMuon group against torch's Muon functions: one Newton-Schulz iteration
# (tight bounds), and DistMuon's five (bf16 rounding noise's bounds)
titan_finetune_test(finetune_muon_ns1 muon_ns1)
titan_finetune_test(finetune_muon muon)
# the same (no products) for a Qwen3MoeForCausalLM: its expert stacks a matrix per expert
titan_finetune_test(finetune_moe_muon_ns0 moe_muon_ns0)

# Bad job inputs are one-line errors before any step runs.
add_test(NAME train_bad_input
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/train_bad_input.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED})

# A full disk (a 2 MB tmpfs) during a save: clear error, previous checkpoint intact.
add_test(NAME checkpoint_full_disk
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_full_disk.sh $<TARGET_FILE:titan>)
set_tests_properties(checkpoint_full_disk PROPERTIES SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=2")

# The same for an MoE, with each load-balancing mode that changes the numbers.
foreach(balance aux_loss bias)
  add_test(NAME train_determinism_moe_${balance}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/determinism.sh $<TARGET_FILE:titan>
            ${TITAN_SHARED}/data/tinyshakespeare/input.txt ${balance})
  set_tests_properties(train_determinism_moe_${balance} PROPERTIES
    ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)
endforeach()

# Metrics output: metrics.jsonl appended on resume (no lost or repeated steps), the logging
# window's averages, the console = JSONL = TensorBoard at every step, a TensorBoard folder per
# run, config.toml, the MoE summary line.
add_test(NAME train_metrics
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/metrics.sh $<TARGET_FILE:titan> ${TITAN_PYTHON})
set_tests_properties(train_metrics PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
if(TITAN_SANITIZE) # ASan's shadow and quarantine are memory titan plan does not count
  set_tests_properties(train_metrics PROPERTIES
                       ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_TEST_SANITIZED=1")
endif()

# A full disk (a 64 KB tmpfs) under metrics.jsonl or the TensorBoard events: that step saved,
# a clear error naming both, whole lines / records, resumed.
add_test(NAME metrics_full_disk
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/metrics_full_disk.sh $<TARGET_FILE:titan>
          ${TITAN_PYTHON} "$<$<AND:$<TARGET_EXISTS:MPI::MPI_C>,$<BOOL:${TITAN_MPIRUN}>>:${TITAN_MPIRUN}>")
set_tests_properties(metrics_full_disk PROPERTIES SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=2")

# Preemption: SIGTERM / SIGINT / job.preemption_signal finish the step, save it, exit 128 + N;
# the resumed run is bitwise the uninterrupted one; a second signal exits at once.
add_test(NAME train_stop_signal
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/stop_signal.sh $<TARGET_FILE:titan>)
set_tests_properties(train_stop_signal PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# Saves after a load_step rewind among an earlier run's newer steps: a last_save_in_hf export
# replaces the old step-N whole and atomically; keep_latest_k never prunes the step just saved.
add_test(NAME checkpoint_rewind
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_rewind.sh $<TARGET_FILE:titan> ${TITAN_SHARED})
set_tests_properties(checkpoint_rewind PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2")

# An old step that cannot be pruned (a mount point: EBUSY) is warned about; training goes on.
add_test(NAME checkpoint_prune_busy
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_prune_busy.sh $<TARGET_FILE:titan>)
set_tests_properties(checkpoint_prune_busy PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=2")

# Out-of-range trainer state in a checkpoint (negative adam_step, ...) is refused by name.
add_test(NAME checkpoint_meta_bounds
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_meta_bounds.sh $<TARGET_FILE:titan>
          ${TITAN_PYTHON})
set_tests_properties(checkpoint_meta_bounds PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2")

# Fine-tuning and resuming do what the user meant: a checkpoint past training.steps, the
# init a load overwrites, torchtitan's checkpoint switches, one HF folder for a fine-tune,
# the tokenizer a checkpoint or token shard records.
add_test(NAME train_finetune
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/finetune.sh $<TARGET_FILE:titan> ${TITAN_SHARED}
          ${TITAN_PYTHON})
set_tests_properties(train_finetune PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)

# Saved activations in the gradients' pages (one rank, one microbatch): bitwise the run
# without (dense / MoE, bf16 / fp32, tied / untied, AC full / selective, validation); plan.
add_test(NAME train_acts_in_grads
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/acts_in_grads.sh $<TARGET_FILE:titan>)
set_tests_properties(train_acts_in_grads PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)

# bf16 mixed precision: close to fp32, deterministic, exact resume, MoE, refusals.
add_test(NAME train_bf16
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/train_bf16.sh $<TARGET_FILE:titan> ${TITAN_SHARED})
set_tests_properties(train_bf16 PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)
# the oneDNN bf16 engine where oneDNN can run a bf16 matmul (a CPU with bf16 units, or the
# reference build of scripts/onednn_ref.sh); skipped elsewhere
add_test(NAME bf16_engine
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/bf16_engine.sh $<TARGET_FILE:titan> ${TITAN_SHARED})
set_tests_properties(bf16_engine PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 900
  SKIP_RETURN_CODE 77)

# [profiling]: the debug config's op-level trace against json, config.toml, metrics.jsonl and
# HF's shapes; torchtitan's schedule; a plugin on one layer under the wrappers; refusals.
add_test(NAME train_profile
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/profile.sh $<TARGET_FILE:titan>
          ${TITAN_PYTHON} ${CMAKE_SOURCE_DIR} ${TITAN_SHARED} ${CMAKE_BINARY_DIR}/examples/librope_bhsd.so)
set_tests_properties(train_profile PROPERTIES TIMEOUT 600)

# The report page (src/train/report.c): a run's report.html and `titan report`, checked
# through the DOM against metrics.jsonl (tests/scripts/report_check.py); resumes, several runs,
# hostile metrics lines. Then the page in headless Chromium (skipped where it is absent).
add_test(NAME train_report
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/report.sh $<TARGET_FILE:titan> ${TITAN_PYTHON}
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt)
set_tests_properties(train_report PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# the progress line on a terminal: in place, throttled, a readable ETA
add_test(NAME progress_tty
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/progress_tty.sh $<TARGET_FILE:titan> ${TITAN_PYTHON})
set_tests_properties(progress_tty PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
add_test(NAME report_screenshot
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/report_screenshot.sh $<TARGET_FILE:titan>
          ${TITAN_PYTHON} ${TITAN_SHARED}/data/tinyshakespeare/input.txt)
set_tests_properties(report_screenshot PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300
                     SKIP_RETURN_CODE 77)

# An MoE trained with the expert bias, validated on a model of its own shape (validation
# batch != training's): the loss equals transformers' with the checkpoint's bias in the
# router's selection (the validation model used to route without the bias).
add_test(NAME train_val_moe_bias
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_val_moe_bias.py
          $<TARGET_FILE:titan> ${TITAN_SHARED}/data/tinyshakespeare/input.txt
          ${CMAKE_BINARY_DIR}/val_moe_bias)
set_tests_properties(train_val_moe_bias PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# Supervised fine-tuning on chat examples (training.dataset_format = "chat", torchtitan 0.3's
# ChatDataset): an HF folder -> titan train -> per-step losses equal PyTorch's on the same rows.
add_test(NAME train_chat_sft
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_chat_sft.py
          $<TARGET_FILE:titan> ${TITAN_SHARED} ${CMAKE_BINARY_DIR}/chat_sft)
set_tests_properties(train_chat_sft PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)
