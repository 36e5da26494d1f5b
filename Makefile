# gpuwire: the project's entry points.
#
#   make demo    release build, then the C examples (examples-c/) on 2 ranks
#   make test    everything CI runs (.ci/run), debug builds throughout:
#                  1. cargo build; the committed include/gpuwire.h must be unchanged by it, and so
#                     must the Fortran layers (include/gpuwire_*.inc) and python/gpuwire/_capi.py
#                     generated from it (`make bindings` regenerates all); gpuwire.f90,
#                     gpuwire.hpp and the Python prototypes must agree with it
#                  2. cargo test (Rust unit and MPI tests, launcher mpirun)
#                  3. C, C++, Fortran and Python tests and examples with Open MPI, 1-3 ranks,
#                     and C tests on 2 and 3 hosts simulated on this machine (scripts/multihost.sh)
#                  4. the same C, C++ and Fortran programs with -fsanitize=address,undefined
#                  5. make install, then out-of-tree C, C++, Fortran, Python, pkg-config and
#                     CMake projects against the installed tree (the README's commands)
#                  6. cargo test and the tests and examples again against MPICH
#   make test-large   counts past 2^31 (tests/mpi_large.rs): every operation on 2^31 + 16 int8,
#                host memory, 2 ranks, one operation per job, Open MPI then MPICH; needs ~9 GB free
#                and ~25 min (GPUWIRE_TEST_LARGE_ALL=1 adds the 17 GB jobs); not part of `make test`
#   make bindings   regenerate the generated layers (include/gpuwire.h, include/gpuwire_*.inc,
#                python/gpuwire/_capi.py)
#   make deps    check prerequisites (scripts/deps.sh; installs Debian packages when root)
#   make install PREFIX=/path   release build, then libraries, headers, Fortran module sources,
#                pkg-config and CMake files and the Python module under PREFIX (DESTDIR honoured;
#                GPUWIRE_PROFILE=debug installs the debug build)
#   make clean
#
# Steps of `make test` run one at a time (.NOTPARALLEL): the machine may have only 2 cores and
# two cargo builds at once would fight over them.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.NOTPARALLEL:
.DEFAULT_GOAL := help

# Open MPI refuses to run as root unless told it is deliberate (containers, CI).
ifeq ($(shell id -u),0)
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
endif

# 3 ranks on 2 cores: allow oversubscription and do not pin ranks to cores.
OMPI_RUN := mpirun --oversubscribe --bind-to none
EXAMPLE_CFLAGS := -std=c99 -Wall -Wextra -Werror -pedantic -O2
EXAMPLES := isend_irecv vstack_matvec cg_poisson darray_cg_poisson darray_blockrow
DEMO_DIR := build/demo
RESULTS := build/results
# Cargo's build directory: CARGO_TARGET_DIR when set (every step and script honours it), else
# target. The MPICH build goes to its mpich/ subdirectory.
CARGO_TARGET_DIR ?= target
MPICH_ENV := MPICC=mpicc.mpich CARGO_TARGET_DIR=$(CARGO_TARGET_DIR)/mpich

.PHONY: help deps demo install bindings test test-header test-bindings test-rust test-c test-asan test-mpich \
	test-install test-large clean

help:
	@sed -n '3,24s/^# \{0,1\}//p' Makefile

deps:
	@bash scripts/deps.sh

# ---- demo ---------------------------------------------------------------------------------------

demo:
	@bash scripts/deps.sh --demo
	cargo build --release
	@bash scripts/soname-link.sh $(CARGO_TARGET_DIR)/release
	@mkdir -p $(DEMO_DIR)
	@for e in $(EXAMPLES); do \
	    echo "mpicc $(EXAMPLE_CFLAGS) -Iinclude examples-c/$$e.c -L$(CARGO_TARGET_DIR)/release -lgpuwire -Wl,-rpath,$(abspath $(CARGO_TARGET_DIR))/release -lm -o $(DEMO_DIR)/$$e"; \
	    mpicc $(EXAMPLE_CFLAGS) -Iinclude examples-c/$$e.c -L$(CARGO_TARGET_DIR)/release -lgpuwire \
	        -Wl,-rpath,$(abspath $(CARGO_TARGET_DIR))/release -lm -o $(DEMO_DIR)/$$e; \
	done
	@echo; echo "== cg_poisson: conjugate gradient for -Laplace(u) = f, 768 x 768 grid, 2 ranks =="
	$(OMPI_RUN) -n 2 $(DEMO_DIR)/cg_poisson 768 2
	@echo; echo "== isend_irecv: rank 0 sends ten float32 to rank 1 =="
	$(OMPI_RUN) -n 2 $(DEMO_DIR)/isend_irecv 2
	@echo; echo "== vstack_matvec: a block-row operator applied across ranks =="
	$(OMPI_RUN) -n 2 $(DEMO_DIR)/vstack_matvec 2
	@echo; echo "== darray_cg_poisson: cg_poisson on distributed arrays (same answer) =="
	$(OMPI_RUN) -n 2 $(DEMO_DIR)/darray_cg_poisson 768 2
	@echo; echo "== darray_blockrow: y = H x and H^T y with x BROADCAST, y SCATTER =="
	$(OMPI_RUN) -n 2 $(DEMO_DIR)/darray_blockrow 2

# ---- install ------------------------------------------------------------------------------------

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
GPUWIRE_PROFILE ?= release
# Cargo's profile "dev" builds into $(CARGO_TARGET_DIR)/debug.
CARGO_PROFILE_FLAG = $(if $(filter release,$(GPUWIRE_PROFILE)),--release,$(if $(filter debug,$(GPUWIRE_PROFILE)),,--profile $(GPUWIRE_PROFILE)))

install:
	@case "$(PREFIX)" in /*) ;; *) echo "make install: PREFIX must be an absolute path"; exit 2;; esac
	cargo build --lib $(CARGO_PROFILE_FLAG)
	bash scripts/install.sh $(CARGO_TARGET_DIR)/$(GPUWIRE_PROFILE) $(PREFIX) $(LIBDIR) $(INCLUDEDIR)

# ---- test ---------------------------------------------------------------------------------------

test: deps
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@$(MAKE) --no-print-directory test-header test-bindings test-rust test-c test-asan test-install \
	    test-mpich
	@echo
	@echo "== make test: every step passed =="
	@echo "   header unchanged, and the Fortran, C++ and Python bindings agree with it;"
	@echo "   cargo test with Open MPI and with MPICH; C, C++, Fortran (and Python) tests and"
	@echo "   examples with Open MPI, under ASan/UBSan, and with MPICH; make install and"
	@echo "   out-of-tree projects against the installed tree"
	@awk '{p += $$1; f += $$2; s += $$3} END {printf "c, c++, fortran, python and install tests: %d passed, %d failed, %d skipped\n", p, f, s}' $(RESULTS)/c-*.txt

# The generated layers, regenerated: the header (cargo build), the Python package's ctypes layer.
bindings:
	cargo build
	python3 scripts/gen-python.py
	python3 scripts/gen-fortran.py

# 1. The committed header and the generated Python layer are what the build generates.
test-header:
	@echo "== 1. cargo build; include/gpuwire.h and python/gpuwire/_capi.py must be unchanged =="
	cargo build
	@if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then \
	    if ! git ls-files --error-unmatch include/gpuwire.h > /dev/null 2>&1; then \
	        echo "FAIL include/gpuwire.h is not committed"; exit 1; \
	    elif git diff --exit-code -- include/gpuwire.h; then \
	        echo "PASS include/gpuwire.h is unchanged by the build"; \
	    else \
	        echo "FAIL the build changed include/gpuwire.h (diff above): commit the regenerated header"; \
	        exit 1; \
	    fi; \
	else \
	    echo "SKIP header check: not a git checkout, nothing to compare include/gpuwire.h with"; \
	    if [ -n "$${CI:-}" ]; then echo "FAIL CI must run from a git checkout"; exit 1; fi; \
	fi
	python3 scripts/gen-fortran.py --check
	python3 scripts/gen-python.py --check

# 1b. The Fortran module, the C++ header and the Python module agree with the C header (names,
# argument counts and kinds, constants, the config struct); the checker catches mismatches.
test-bindings:
	@echo "== 1b. bindings agree with include/gpuwire.h =="
	python3 scripts/check-bindings.py
	python3 scripts/check-bindings.py --self-test
	python3 scripts/gen-fortran.py --self-test

# 2. Rust unit tests and MPI integration tests (they launch ranks with $GPUWIRE_MPIEXEC).
test-rust:
	@echo "== 2. cargo test (Open MPI) =="
	GPUWIRE_MPIEXEC=mpirun cargo test
	bash scripts/nvrtc-check.sh
	bash scripts/null-device.sh tests

# 3. C, C++, Fortran and Python tests and examples against Open MPI.
test-c:
	@echo "== 3. C, C++, Fortran and Python tests and examples (Open MPI) =="
	cargo build
	bash scripts/run-c-tests.sh openmpi

# 4. The same C programs with AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan:
	@echo "== 4. C, C++ and Fortran tests and examples with -fsanitize=address,undefined (Open MPI) =="
	cargo build
	bash scripts/run-c-tests.sh openmpi --sanitize

# 5. make install (of the debug build) into a scratch prefix; projects built against it alone.
test-install:
	@echo "== 5. make install; out-of-tree projects against the installed tree (Open MPI) =="
	cargo build
	bash scripts/install-test.sh

# 6. Everything again against MPICH (a separate target directory: the library links one MPI; a
# new one starts as a copy of the Open MPI one without mpi-sys, mpi and gpuwire, so that the
# other dependencies are not compiled twice: scripts/seed-target.sh).
test-mpich:
	@echo "== 6. cargo test, C, C++ and Fortran tests and examples (MPICH) =="
	@bash scripts/seed-target.sh $(CARGO_TARGET_DIR)/debug $(CARGO_TARGET_DIR)/mpich/debug
	$(MPICH_ENV) cargo build
	$(MPICH_ENV) GPUWIRE_MPIEXEC=mpiexec.mpich cargo test
	$(MPICH_ENV) bash scripts/null-device.sh tests-mpich
	bash scripts/run-c-tests.sh mpich

# Counts past 2^31 (not in `make test`: several GB per job and long runs).
test-large:
	@echo "== counts past 2^31: every operation on 2^31 + 16 int8 (Open MPI, then MPICH) =="
	GPUWIRE_TEST_TIMEOUT=900 GPUWIRE_MPIEXEC=mpirun cargo test --test mpi_large
	$(MPICH_ENV) GPUWIRE_TEST_TIMEOUT=900 GPUWIRE_MPIEXEC=mpiexec.mpich cargo test --test mpi_large

clean:
	cargo clean
	rm -rf build $(CARGO_TARGET_DIR)/mpich
