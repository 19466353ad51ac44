# zinc — the two commands a new user needs. Everything else is CMake (build/).
#   make run    install what is missing, build, train the default model (zinc train)
#   make test   install what is missing, build, run every test (ctest)
# For CI and parser work (docs/testing.md):
#   make sanitize   a second build (build-asan) under ASan+UBSan, CPU only, and its tests
#   make fuzz       the libFuzzer targets (clang, build-fuzz), each run FUZZ_SECONDS (default 60)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
SANITIZE_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60

.PHONY: all deps build run test sanitize fuzz clean

all: build

deps:
	@bash tools/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/zinc train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# CUDA off: a sanitizer does not see into kernels, and the nvcc build would double CI's time.
sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -DZINC_CUDA=OFF -DZINC_SANITIZE=address,undefined
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

fuzz:
	@bash tools/install-deps.sh fuzz
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DZINC_FUZZ=ON -DZINC_CUDA=OFF -DZINC_MPI=OFF \
	  -DZINC_SANITIZE=address,undefined
	@grep -q '^ZINC_LIBFUZZER_WORKS:INTERNAL=1' $(FUZZ_BUILD)/CMakeCache.txt || \
	  { echo "make fuzz: $$(grep '^CMAKE_C_COMPILER:' $(FUZZ_BUILD)/CMakeCache.txt) cannot link libFuzzer (install clang)"; exit 1; }
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
