# visattn: `make test` and `make bench` install what is missing, configure, build and run.
#   make test       build and run every test (GoogleTest, the CLI, `visattn check`, pytest)
#   make python     pip install the Python package (visattn) from this tree
#   make bench      `visattn check`, then `visattn bench` on the best backend here
#   make sanitize   build and run the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       build the libFuzzer target with clang and run it for FUZZ_SECONDS
#   make deps       only install the Debian packages the build needs (and, where nvcc is, the
#                   cuDNN frontend headers of the cudnn backend: scripts/fetch_cudnn_frontend.sh)

BUILD        ?= build
BUILD_TYPE   ?= Release
JOBS         ?= $(shell nproc)
CUDA_ARCHS   ?=
BENCH_SCALE  ?= auto
BENCH_BUDGET ?= 60
BENCH_JSON   ?= $(BUILD)/bench.json
FUZZ_SECONDS ?= 60
WORKLOADS    ?= ../shared/workloads.json

DEBIAN_PACKAGES := cmake ninja-build g++ python3 googletest libgtest-dev libcli11-dev \
                   nlohmann-json3-dev libopenblas-dev
FUZZ_PACKAGES   := clang libclang-rt-dev
PYTHON          ?= python3
PY_PACKAGES     := scikit-build-core nanobind numpy ml_dtypes pytest

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Installs the Debian packages in $(1) that are not installed yet.
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	  grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

.PHONY: all deps build test python bench sanitize fuzz clean
all: build

# nvcc as CMake finds it (PATH or the toolkit's default place): only then is there a cudnn backend
# to build, so machines without CUDA fetch nothing.
HAVE_NVCC := $(shell command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] && echo yes)

deps:
	$(call apt_install,$(DEBIAN_PACKAGES))
ifeq ($(HAVE_NVCC),yes)
	@bash scripts/fetch_cudnn_frontend.sh
endif

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  $(if $(CUDA_ARCHS),-DVISATTN_CUDA_ARCHITECTURES="$(CUDA_ARCHS)")

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build python
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(PYTHON) -m pytest -q python/tests

# Installs the build requirements once, then builds the extension with them (no isolated env).
python: deps
	$(PYTHON) -m pip install -q $(PY_PACKAGES)
	$(PYTHON) -m pip install -q --no-build-isolation \
	  $(if $(CUDA_ARCHS),--config-settings=cmake.define.VISATTN_CUDA_ARCHITECTURES="$(CUDA_ARCHS)") .

bench: build
	$(BUILD)/visattn info
	$(BUILD)/visattn check --cases 100
	$(BUILD)/visattn bench --workloads $(WORKLOADS) --scale $(BENCH_SCALE) \
	  --budget $(BENCH_BUDGET) --json $(BENCH_JSON)

sanitize: deps
	cmake -S . -B $(BUILD)-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DVISATTN_SANITIZE=address,undefined -DVISATTN_CUDA=OFF
	cmake --build $(BUILD)-sanitize -j $(JOBS)
	cd $(BUILD)-sanitize && ctest --output-on-failure -j $(JOBS)

fuzz: deps
	$(call apt_install,$(FUZZ_PACKAGES))
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DVISATTN_FUZZ=ON -DVISATTN_SANITIZE=address,undefined -DVISATTN_BUILD_TOOLS=OFF -DVISATTN_CUDA=OFF \
	  -DVISATTN_BUILD_TESTS=ON
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_attention_args
	mkdir -p $(BUILD)-fuzz/corpus
	$(BUILD)-fuzz/tests/fuzz/fuzz_attention_args -max_total_time=$(FUZZ_SECONDS) \
	  -print_final_stats=1 -artifact_prefix=$(BUILD)-fuzz/ $(BUILD)-fuzz/corpus tests/fuzz/corpus

clean:
	rm -rf $(BUILD) $(BUILD)-sanitize $(BUILD)-fuzz build-python
