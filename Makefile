# The front door: make build | test | train | bench | asan | format.
BUILD ?= build
JOBS ?= 2
PY := .venv/bin/python

.PHONY: deps build test train bench bench-tokenizer asan fuzz format clean

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# ctest's summary is the last thing printed.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The default demo: train the debug model on Tiny Shakespeare (byte tokens), export it as a
# Hugging Face folder, and sample from it. About 5 minutes on 2 cores.
train: build
	@$(BUILD)/titan train --flavor debugmodel --data ../shared/data/tinyshakespeare/input.txt \
		--steps 200 --batch 8 --seq-len 128 --lr 3e-3 --warmup 20 --decay-ratio 0.5 \
		--log-freq 10 --metrics runs/debug/metrics.jsonl --out runs/debug/hf --sample 300

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

# libFuzzer on the safetensors reader for FUZZ_SECONDS (clang with -fsanitize=fuzzer; ctest
# runs the same target through the standalone driver with any compiler).
FUZZ_SECONDS ?= 60
fuzz:
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target libfuzzer_safetensors
	@mkdir -p build-fuzz/corpus-safetensors
	@build-fuzz/tests/libfuzzer_safetensors -max_total_time=$(FUZZ_SECONDS) \
		build-fuzz/corpus-safetensors tests/fuzz/corpus/safetensors

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	@rm -rf $(BUILD) build-asan
