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

.PHONY: all build run test rust-test c-tests py-tests interop header check-header bench examples clean venv fmt clippy

all: build

build:
	$(CARGO) build --release --lib --bins
	ln -sf libtidewire.so $(PROFILE_DIR)/libtransfer_engine.so

## The main job: two engines in two processes on 127.0.0.1, write + read, every byte verified.
run: build
	$(PROFILE_DIR)/tidewire-bench demo

## Every test: Rust (unit + integration), C, Python, and interop with real Mooncake peers.
test: build rust-test c-tests py-tests interop
	@echo "make test: all suites passed"

rust-test:
	$(CARGO) test --release

c-tests: build
	@mkdir -p $(BUILD_C)
	@set -e; for src in c_tests/test_*.c; do \
	  name=$$(basename $$src .c); \
	  gcc $(CFLAGS_TEST) $$src -o $(BUILD_C)/$$name -L$(PROFILE_DIR) -ltidewire -ldl -lpthread -Wl,-rpath,$$PWD/$(PROFILE_DIR); \
	done
	@set -e; for t in $(BUILD_C)/test_*; do echo "== $$t"; TIDEWIRE_LIB=$$PWD/$(LIB) $$t; done

venv:
	scripts/setup_mooncake_venv.sh

py-tests: build
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python $(PY) -m pytest -q python/tests

## Interop runs inside a private network namespace: Mooncake's listeners bind all addresses.
interop: build
	@[ -x $(PY) ] || scripts/setup_mooncake_venv.sh
	unshare -n bash -c 'ip link set lo up && TIDEWIRE_LIB=$$PWD/$(LIB) PYTHONPATH=python $(PY) -m pytest -q tests/interop'

header:
	UPDATE_HEADER=1 $(CARGO) test --test header_up_to_date

check-header:
	$(CARGO) test --test header_up_to_date

bench: build
	$(PROFILE_DIR)/tidewire-bench loopback

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

clean:
	$(CARGO) clean
