# kiln — the two commands of the quick start:
#   make run    installs dependencies, builds everything, runs the main job
#   make test   installs dependencies, builds everything, runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build run test test-asan bench clean

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

bench: build
	@./$(BUILD)/bin/bench_gemm
	@./$(BUILD)/bin/fusion_bench
	@./$(BUILD)/bin/attention_bench

clean:
	rm -rf $(BUILD) build-asan
