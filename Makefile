# The front door: make build | test | train | bench | asan | format.
BUILD ?= build
JOBS ?= 2
PY := .venv/bin/python

# Quiet recursion: cmake's generated Makefiles call make recursively, and without this every
# level prints `gmake[N]: Entering directory ...` (hundreds of lines per build).
MAKEFLAGS += --no-print-directory

.PHONY: deps deps-build build test test-cpu-classes test-amx-emulated train demo-data bench bench-tokenizer asan fuzz format clean

# Everything the tests need (the Python references: PyTorch, transformers; several GB).
deps:
	@bash scripts/deps.sh

# What building and training need: the Debian packages only.
deps-build:
	@bash scripts/deps.sh --build

build: deps-build
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# ctest's summary is the last thing printed.
test: deps build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The tests whose expectations depend on the CPU (bf16 units, AMX, the kernels' ISA) again, as
# on each other CPU class (scripts/cpu_sim.sh: root and a private mount namespace, else skipped;
# docs/testing.md): a test that holds only on the developer's class fails here, not on the next
# CI machine. About a minute; .ci/run runs it after `make test`.
CPU_TESTS = amx|_isa|peak|bf16|dpbf
test-cpu-classes: build
	@if ! scripts/cpu_sim.sh --check; then \
	  echo "test-cpu-classes: skipped (needs root, unshare -m and a bind mount over /proc/cpuinfo)"; exit 0; fi; \
	for c in avx2 avx512 avx512_bf16; do log=$(BUILD)/cpu_sim_$$c.log; \
	  scripts/cpu_sim.sh $$c ctest --test-dir $(BUILD) -R '$(CPU_TESTS)' -E 'train_bf16|bf16_engine' \
	    --output-on-failure -j $(JOBS) >$$log 2>&1 && rc=0 || rc=$$?; \
	  if [ $$rc = 0 ]; then echo "as on a CPU class $$c: $$(grep 'tests passed' $$log)"; \
	  else cat $$log; echo "as on a CPU class $$c: FAILED (scripts/cpu_sim.sh $$c ...)"; exit 1; fi; done

# titan's AMX kernels (src/ops/cpu/amx_gemm.c) on emulated tiles (src/ops/cpu/amx_emulate.c, the
# SDM's semantics), with titan choosing as on an AMX machine (scripts/cpu_sim.sh amx), where the
# CPU has AVX512_BF16 but no AMX: a second build in $(BUILD)-amx-emulated, then the whole suite
# there (the emulated tiles cost it ~7% over the native suite's time on Zen 4).
# Skipped on a CPU with AMX (there `make test` runs them on the tiles) or without AVX512_BF16
# (nothing can run them), and without root. docs/testing.md.
test-amx-emulated: deps
	@if grep -qw amx_bf16 /proc/cpuinfo || ! grep -qw avx512_bf16 /proc/cpuinfo || ! scripts/cpu_sim.sh --check; then \
	  echo "test-amx-emulated: skipped (needs AVX512_BF16 without AMX, root, unshare -m and a bind mount)"; exit 0; fi; \
	log=$(BUILD)-amx-emulated/cpu_sim_amx.log; \
	cmake -S . -B $(BUILD)-amx-emulated -DCMAKE_BUILD_TYPE=Release -DTITAN_AMX_EMULATE=ON >/dev/null && \
	cmake --build $(BUILD)-amx-emulated -j $(JOBS) >/dev/null || exit 1; \
	scripts/cpu_sim.sh amx ctest --test-dir $(BUILD)-amx-emulated --output-on-failure -j $(JOBS) >$$log 2>&1 && rc=0 || rc=$$?; \
	if [ $$rc = 0 ]; then echo "as on an AMX machine, tiles emulated: $$(grep 'tests passed' $$log)"; \
	else cat $$log; echo "as on an AMX machine, tiles emulated: FAILED (make test-amx-emulated)"; exit 1; fi

# The default demo (configs/qwen3_debug.toml): a small Qwen3 with the Qwen3 tokenizer on
# Tiny Shakespeare (the last 115 KB held out for validation), checkpoints, TensorBoard, a
# Hugging Face export and a sample. A few minutes on 2 cores. Starts fresh: an earlier
# run's checkpoints would otherwise be resumed.
SHAKESPEARE = ../shared/data/tinyshakespeare/input.txt
demo-data:
	@mkdir -p runs/data
	@head -c 1000000 $(SHAKESPEARE) > runs/data/shakespeare_train.txt
	@tail -c +1000001 $(SHAKESPEARE) > runs/data/shakespeare_val.txt

train: build demo-data
	@rm -rf runs/debug/checkpoint
	@$(BUILD)/titan train --config configs/qwen3_debug.toml

bench: build
	@bash scripts/deps.sh --bench
	@SKIP_BUILD=1 bash bench/bench_train.sh

bench-tokenizer: build
	@bash scripts/deps.sh --bench
	@BUILD=$(BUILD) bash bench/bench_tokenizer.sh

# The whole suite under AddressSanitizer + UBSan (slow: the parity tests run too).
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTITAN_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS)

# libFuzzer on each fuzz target (docs/testing.md#fuzzing) for FUZZ_SECONDS each
# (clang with -fsanitize=fuzzer; ctest runs the same targets through the standalone driver
# with any compiler).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= safetensors tokenizer dataset config hf_config ckpt_meta
fuzz:
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@for t in $(FUZZ_TARGETS); do \
		cmake --build build-fuzz -j $(JOBS) --target libfuzzer_$$t && \
		mkdir -p build-fuzz/corpus-$$t && \
		build-fuzz/tests/libfuzzer_$$t -max_total_time=$(FUZZ_SECONDS) \
			build-fuzz/corpus-$$t tests/fuzz/corpus/$$t || exit 1; \
	done

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	@rm -rf $(BUILD) build-asan
