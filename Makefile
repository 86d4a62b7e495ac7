# The front door: make build | test | train | bench | asan | format.
BUILD ?= build
JOBS ?= 2
PY := .venv/bin/python

.PHONY: deps build test train bench bench-tokenizer asan format clean

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# ctest's summary is the last thing printed.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The default demo: train the debug model on Tiny Shakespeare (byte tokens), export it as a
# Hugging Face folder, and sample from it (configs/qwen3_debug.toml). About 5 minutes on 2 cores.
train: build
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

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	@rm -rf $(BUILD) build-asan
