# tidewire — see README.md. Every target works on a fresh machine after `.ci/run`'s setup
# (or scripts/setup_mooncake_venv.sh for the Mooncake interop peer).
SHELL := /bin/bash
CARGO ?= cargo
PROFILE_DIR := target/release
LIB := $(PROFILE_DIR)/libtidewire.so
VENV ?= .venv-mooncake
PY ?= $(VENV)/bin/python
CFLAGS_TEST := -std=c11 -Wall -Wextra -Werror -pedantic -g -Iinclude
BUILD_C := target/c_tests

.PHONY: all build run test layers rust-test c-tests py-tests py-types interop header check-header bench bench-submit bench-plots examples clean venv fmt clippy install install-check wheel tq-test serving-test store-stress store-stress-mooncake pd-test

all: build

SOMAJOR := $(shell sed -n 's/^version *= *"\([0-9]*\)\..*/\1/p' Cargo.toml | head -n 1)

## The library carries SONAME libtidewire.so.$(SOMAJOR); the link beside it lets programs linked
## against the build tree (tests, examples) find it.
build:
	$(CARGO) build --release --workspace --lib --bins
	ln -sf libtidewire.so $(PROFILE_DIR)/libtidewire.so.$(SOMAJOR)
	ln -sf libtidewire.so $(PROFILE_DIR)/libtransfer_engine.so

## Installs libtidewire.so.M.m (+ links, libtransfer_engine.so, libtidewire.a), both headers,
## tidewire.pc and the CMake package: make install PREFIX=/usr/local [LIBDIR=...] [DESTDIR=...]
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
install: build
	scripts/install.sh "$(PREFIX)" "$(LIBDIR)" "$(INCLUDEDIR)"

## Installs into a temporary prefix and builds examples against it with pkg-config and CMake.
install-check: build
	tests/install/check.sh

## The main job: two engines in two processes on 127.0.0.1, write + read, every byte verified.
run: build
	$(PROFILE_DIR)/tidewire-bench demo

## Every test: Rust (unit + integration), C, Python, and interop with real Mooncake peers.
test: layers build rust-test c-tests py-types py-tests interop examples install-check
	@echo "make test: all suites passed"

## The layers of src/ (written in src/README.md): no upward import, no circle, no file over 600
## lines (Rust in src/, Python in python/).
layers:
	python3 scripts/check_layers.py
	python3 scripts/check_docs.py

## The network-namespace tests (tests/hostile_netns.rs) need root; here they fail rather than
## skip where namespaces are missing (TIDEWIRE_REQUIRE_NETNS=0 make test skips them, saying so).
rust-test:
	TIDEWIRE_REQUIRE_NETNS=$${TIDEWIRE_REQUIRE_NETNS-1} $(CARGO) test --release --workspace

## C tests: each c_tests/test_*.c against the shared library (test_*dlopen* loads it at run
## time instead), test_native_api once more linked statically, and the header compiled as C++.
c-tests: build
	@mkdir -p $(BUILD_C)
	@set -e; bins=""; \
	for src in c_tests/test_*.c; do \
	  name=$$(basename $$src .c); out=$(BUILD_C)/$$name; \
	  case $$name in \
	    *dlopen*) gcc $(CFLAGS_TEST) $$src -o $$out -ldl ;; \
	    *) gcc $(CFLAGS_TEST) $$src -o $$out -L$(PROFILE_DIR) -ltidewire -ldl -lpthread -Wl,-rpath,$$PWD/$(PROFILE_DIR) ;; \
	  esac; \
	  bins="$$bins $$out"; \
	done; \
	gcc $(CFLAGS_TEST) c_tests/test_native_api.c -o $(BUILD_C)/test_native_api_static $(PROFILE_DIR)/libtidewire.a -lpthread -ldl -lm; \
	g++ -std=c++17 -Wall -Wextra -Werror -pedantic -g -Iinclude c_tests/header_cxx.cpp -o $(BUILD_C)/header_cxx -L$(PROFILE_DIR) -ltidewire -Wl,-rpath,$$PWD/$(PROFILE_DIR); \
	fail=0; \
	for t in $$bins $(BUILD_C)/test_native_api_static $(BUILD_C)/header_cxx; do \
	  echo "== $$t"; TIDEWIRE_LIB=$$PWD/$(LIB) timeout 120 $$t || { echo "FAILED: $$t"; fail=1; }; \
	done; \
	for t in $(BUILD_C)/test_native_api $(BUILD_C)/test_native_scatter $(BUILD_C)/test_nixl_pattern; do \
	  echo "== $$t (TCP only: TW_SAME_HOST=0)"; TW_SAME_HOST=0 TIDEWIRE_LIB=$$PWD/$(LIB) timeout 120 $$t || { echo "FAILED: $$t (TCP only)"; fail=1; }; \
	done; \
	exit $$fail

## Builds and runs every example: examples/c/*.c, examples/cpp/*.cpp, examples/python/*.py.
examples: build
	@mkdir -p target/examples
	@set -e; bins=""; \
	for src in examples/c/*.c; do \
	  out=target/examples/$$(basename $$src .c); \
	  gcc $(CFLAGS_TEST) $$src -o $$out -L$(PROFILE_DIR) -ltidewire -Wl,-rpath,$$PWD/$(PROFILE_DIR); \
	  bins="$$bins $$out"; \
	done; \
	for src in examples/cpp/*.cpp; do \
	  out=target/examples/$$(basename $$src .cpp)_cpp; \
	  g++ -std=c++17 -Wall -Wextra -Werror -pedantic -g -Iinclude $$src -o $$out -L$(PROFILE_DIR) -ltidewire -Wl,-rpath,$$PWD/$(PROFILE_DIR); \
	  bins="$$bins $$out"; \
	done; \
	for b in $$bins; do echo "== $$b"; timeout 60 $$b; done; \
	py=$(PY); [ -x "$$py" ] || py=python3; \
	for src in examples/python/*.py; do \
	  [ -e "$$src" ] || continue; \
	  echo "== $$src"; TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python timeout 60 $$py $$src; \
	done; \
	echo "make examples: all examples ran"

venv:
	scripts/setup_mooncake_venv.sh

## A py3-none-<platform> wheel that carries libtidewire.so, in target/wheels/ (the build backend,
## python/_build/tidewire_build.py, runs cargo itself; `pip install ./python` does the same).
wheel:
	@py=$(PY); [ -x "$$py" ] || py=python3; \
	$$py -m pip wheel --no-deps --no-index --wheel-dir target/wheels ./python

## mypy on the Python package (settings in python/pyproject.toml): the public API is annotated
## and must stay clean. mypy lives in its own small environment, made on first use.
TYPES_VENV ?= .venv-types
MYPY_VERSION ?= 2.4.1
py-types:
	@[ -x $(TYPES_VENV)/bin/mypy ] || { python3 -m venv $(TYPES_VENV) && \
	  $(TYPES_VENV)/bin/pip install --quiet "mypy==$(MYPY_VERSION)"; }
	cd python && ../$(TYPES_VENV)/bin/mypy

py-tests: build
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python $(PY) -m pytest -q python/tests --ignore=python/tests/serving --ignore=python/tests/pd

## The Store's stress and fault suite, long variant (python/tests/store_stress.py): 2 GiB through a
## 256 MiB segment, 20k cycles, a 1 GiB value, 512 threads in 8 processes; `make test` runs the
## short one. store-stress-mooncake runs the same cases against the Mooncake wheel, for comparison
## (in a private network namespace: Mooncake's listeners bind all addresses); it prints a table.
store-stress: build
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	TIDEWIRE_STORE_STRESS=long TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python $(PY) -m pytest -q python/tests/test_store_stress.py

store-stress-mooncake:
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	unshare -n bash -c 'ip link set lo up && PYTHONPATH=python $(PY) python/tests/store_stress.py --target mooncake $(STRESS_ARGS)'

## TransferQueue's own MooncakeStore client on tidewire (needs .venv-tq: scripts/setup_tq_venv.sh,
## several GiB); fails rather than skips when that environment is missing.
tq-test: build
	@[ -x .venv-tq/bin/python ] || [ -n "$$TIDEWIRE_TQ_PYTHON" ] || scripts/setup_tq_venv.sh
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	TIDEWIRE_REQUIRE_TQ=1 TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python $(PY) -m pytest -q python/tests/test_tq_client.py

## The serving stacks' own Store clients on tidewire (SGLang HiCache, vLLM MooncakeStoreConnector,
## LMCache mooncakestore://), each beside the same driver on the Mooncake wheel, and the tensor
## helpers (they need torch). Needs .venv-serving (scripts/setup_serving_venv.sh, which reuses
## .venv-tq's torch); fails rather than skips when that environment is missing.
serving-test: build
	@[ -x .venv-serving/bin/python ] || scripts/setup_serving_venv.sh
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	TIDEWIRE_REQUIRE_SERVING=1 TIDEWIRE_SERVING_PYTHON=$$PWD/.venv-serving/bin/python TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python:python/tests $(PY) -m pytest -q -s python/tests/serving
	TIDEWIRE_REQUIRE_SERVING=1 TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python:python/tests .venv-serving/bin/python -m pytest -q python/tests/test_store_tensor.py python/tests/test_store_differential.py

## Interop runs inside a private network namespace: Mooncake's listeners bind all addresses.
interop: build
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	unshare -n bash -c 'ip link set lo up && TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python $(PY) -m pytest -q tests/interop'

header:
	UPDATE_HEADER=1 $(CARGO) test --test header_up_to_date

check-header:
	$(CARGO) test --test header_up_to_date

## With RESULTS=DIR (a side-by-side results folder), also draws its charts (see bench-plots).
bench: build
	$(PROFILE_DIR)/tidewire-bench loopback
	@if [ -n "$(RESULTS)" ]; then $(MAKE) --no-print-directory bench-plots RESULTS="$(RESULTS)"; fi

## Throughput-vs-block-size and latency charts of a side-by-side results folder:
## make bench-plots RESULTS=DIR [PLOTS=OUT_DIR] [PLOT_PY=python with matplotlib]. Prints where
## it wrote them (default DIR/plots); says how to install matplotlib when it is missing.
PLOT_PY ?= $(shell for p in .venv-plot/bin/python python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import matplotlib' 2>/dev/null && { echo $$p; exit; }; done; echo python3)
bench-plots:
	@[ -n "$(RESULTS)" ] || { echo "usage: make bench-plots RESULTS=results_dir [PLOTS=out_dir]"; exit 2; }
	$(PLOT_PY) scripts/plot_bench.py "$(RESULTS)" $(PLOTS)

## Cost of allocateBatchID + submitTransfer (16,384 x 4 KiB to a target process over loopback TCP).
bench-submit: build
	@mkdir -p target/bench
	gcc -std=c11 -O2 -Wall -Wextra -Werror -pedantic -g -Iinclude bench/c/batch_submit.c -o target/bench/batch_submit -L$(PROFILE_DIR) -ltidewire -Wl,-rpath,$$PWD/$(PROFILE_DIR)
	TW_SAME_HOST=0 target/bench/batch_submit $(BENCH_SUBMIT_ARGS)

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean

## ---- Hardening: fuzzing, sanitizers, model checking (nightly toolchain) ----------------------
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := data_frames handshake_frame descriptor_json http_response rpc_request auth_frames \
  master_request master_reply master_http_request
SAN_TARGET := x86_64-unknown-linux-gnu
## Rust tests under the sanitizers: the unit tests and the wire-level integration suites.
SAN_TESTS ?= --lib --test bad_input --test tcp_loopback --test scatter --test hostile

.PHONY: fuzz asan tsan valgrind loom

## Every fuzz target (cargo-fuzz, nightly) for FUZZ_SECONDS each, starting from fuzz/seeds.
fuzz:
	@set -e; cd fuzz; for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t; echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp \
	  cargo +nightly fuzz run $$t corpus/$$t seeds/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096; \
	done

## AddressSanitizer: the Rust tests (nightly) and the C tests (gcc, with UBSan).
## intercept_send=0: ASan checks a send's buffer only after the kernel has copied it, so a
## WRITE whose reply was read and whose buffer was freed in that window reads as a
## use-after-free that never touched freed memory. Receive buffers are still checked, and
## `make valgrind` checks send buffers when the call is made.
asan:
	RUSTFLAGS="-Zsanitizer=address" ASAN_OPTIONS=detect_leaks=0:intercept_send=0 \
	  $(CARGO) +nightly test --release --target $(SAN_TARGET) --target-dir target/asan $(SAN_TESTS)
	ASAN_OPTIONS=intercept_send=0 LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp \
	  $(MAKE) c-tests BUILD_C=target/c_tests_asan \
	  CFLAGS_TEST="$(CFLAGS_TEST) -fsanitize=address,undefined -fno-omit-frame-pointer"

## ThreadSanitizer on the concurrency unit tests (latch, channels, id table), then on the TCP
## client and server threads (loopback and hostile-peer tests), with std rebuilt under the
## sanitizer (-Zbuild-std, needs the nightly rust-src component).
tsan:
	RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=1" \
	  $(CARGO) +nightly test -Zbuild-std --release --target $(SAN_TARGET) --target-dir target/tsan --lib -- \
	  --test-threads 1 batch chan ids completion
	RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=1 suppressions=$$PWD/scripts/tsan.supp" \
	  $(CARGO) +nightly test -Zbuild-std --release --target $(SAN_TARGET) --target-dir target/tsan \
	  --test tcp_loopback --test hostile -- --test-threads 1

## valgrind memcheck on every C test program (built by `make c-tests`).
valgrind: c-tests
	@set -e; for t in $(BUILD_C)/test_*; do \
	  echo "== valgrind $$t"; TW_SAME_HOST=0 TIDEWIRE_LIB=$$PWD/$(LIB) timeout 600 \
	    valgrind -q --error-exitcode=99 --leak-check=no --suppressions=scripts/valgrind.supp $$t; \
	done

## loom models of the lane channel, the completion latch and a batch's completion.
loom:
	RUSTFLAGS="--cfg loom" $(CARGO) test --release --target-dir target/loom --lib loom_

## The serving stacks' own P/D transfer code between a prefill and a decode process over TCP
## (vLLM's MooncakeConnector, SGLang's Mooncake KV manager/sender/receiver, LMCache's mooncake_te
## channel; python/tests/pd/), each on tidewire and beside it on the Mooncake wheel, with the
## median transfer times printed (PD-TIME lines). Needs .venv-serving, like serving-test; fails
## rather than skips when that environment is missing.
pd-test: build
	@[ -x .venv-serving/bin/python ] || scripts/setup_serving_venv.sh
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	TIDEWIRE_REQUIRE_SERVING=1 TIDEWIRE_SERVING_PYTHON=$$PWD/.venv-serving/bin/python TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python:python/tests $(PY) -m pytest -q -s python/tests/pd
