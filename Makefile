# kiln — the two commands of the quick start:
#   make run    installs dependencies, builds everything, runs the main job
#   make test   installs dependencies, builds everything, runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build run test test-asan fuzz bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: fine-tune a small BERT on the demo data, evaluate, predict.
run: build
	@bash scripts/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The test suite under AddressSanitizer + UBSan, in its own build folder.
test-asan: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON > /dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS)

# Fuzzing (docs/fuzzing.md): the libFuzzer targets of fuzz/, built with clang
# in build-fuzz, each run for FUZZ_SECONDS seconds; fails on any finding.
# Not part of `make test`, which replays their corpora.
FUZZ_SECONDS ?= 60
fuzz:
	@bash scripts/install-deps.sh --fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) bash scripts/fuzz.sh

bench: build
	@./$(BUILD)/bin/bench_gemm
	@./$(BUILD)/bin/fusion_bench
	@./$(BUILD)/bin/attention_bench

clean:
	rm -rf $(BUILD) build-asan build-fuzz
