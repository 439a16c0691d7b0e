# The verbs every contributor uses. `make test` and `make serve` set up everything they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MATURIN := $(VENV)/bin/maturin
# What serving needs (the package and its dependencies), and that plus the dev extras (tests,
# linters, type checker) for everything else.
RUNTIME_STAMP := $(VENV)/.runtime-installed
STAMP := $(VENV)/.deps-installed
# pip's ~200 lines of progress go here and are shown only when a step fails.
SETUP_LOG := $(VENV)/setup.log
QUIETLY = >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }
export VIRTUAL_ENV := $(abspath $(VENV))
# Rebuilds the extension in place (the dependencies and the editable install come from a stamp).
BUILD_CORE = $(MATURIN) develop --release --skip-install --quiet

.PHONY: install build test test-rust test-python lint stubtest fmt bench serve demo fuzz mutants clean

$(MATURIN):
	@echo "creating $(VENV) with pip and maturin"
	@mkdir -p $(VENV)
	@$(PYTHON) -m venv $(VENV) $(QUIETLY)
	@$(PY) -m pip install --quiet --upgrade pip $(QUIETLY)
	@$(PY) -m pip install --quiet "maturin>=1.9.4,<2" $(QUIETLY)

$(RUNTIME_STAMP): pyproject.toml | $(MATURIN)
	@echo "installing what serving needs and building the Rust core (the first build takes minutes)"
	@$(MATURIN) develop --release --quiet $(QUIETLY)
	@touch $@

$(STAMP): pyproject.toml | $(MATURIN)
	@echo "installing the dependencies and the dev extras, building the Rust core (the first build takes minutes)"
	@$(MATURIN) develop --release --extras dev --quiet $(QUIETLY)
	@touch $@ $(RUNTIME_STAMP)

install: $(STAMP)

# Rebuilds the extension in release mode, in place (benchmarks and the agent need speed). The
# dependencies and the editable install come from the step above, once per pyproject change.
build: $(STAMP)
	$(BUILD_CORE)

test: build test-rust test-python

test-rust:
	cargo test --quiet

# Two workers: most of the suite's time is spent waiting on processes, sockets and long-polls,
# so even a 2-core machine runs it in about two thirds of the time (TEST_WORKERS=0: one process).
TEST_WORKERS ?= 2
test-python: build
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS)

lint: $(STAMP)
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(VENV)/bin/mypy python

# The hand-written stubs against the built extension (the stub is the public contract).
stubtest: build
	$(PY) -m mypy.stubtest modal_workspace_core._core

fmt: $(STAMP)
	cargo fmt
	$(VENV)/bin/ruff format python tests bench
	$(VENV)/bin/ruff check --fix python tests bench

# BENCH_SIZE: bytes of /dev/zero the agent's throughput row pipes through base64 (e.g. 256M).
BENCH_SIZE ?= 1G
# BENCH_SNAPSHOT_SIZE: the tree the snapshot rows copy (snapshot, fork, resume against cp -a).
BENCH_SNAPSHOT_SIZE ?= 1G
bench: build
	cargo run --release --quiet --example ring_bench
	$(PY) bench/ring_bench.py
	$(PY) bench/agent_bench.py --size $(BENCH_SIZE)
	$(PY) bench/poller_bench.py
	$(PY) bench/snapshot_bench.py --size $(BENCH_SNAPSHOT_SIZE)
	$(PY) bench/metrics_bench.py

# Longer property runs than `make test` does (PROPTEST_CASES / HYPOTHESIS profile).
fuzz: build
	PROPTEST_CASES=200000 cargo test --release --quiet policy
	HYPOTHESIS_PROFILE=long $(PY) -m pytest -q tests/test_policy.py

# Mutation testing of the pure core (not part of `make test` or CI): cargo-mutants plants one
# small bug at a time in each module of MUTANTS_MODULES and runs that module's own tests, which
# must fail. Hours on two cores: narrow it with MUTANTS_MODULES=ring or MUTANTS_ARGS (say
# `--shard 1/4`, `-j 2`, `--file src/ring/page.rs`). A mutant whose tests run past five times the
# unmutated run (20 s at least) hangs them: a timeout, caught. Builds skip debug info (faster),
# and `--cargo-arg=--lib` keeps every build to the library's tests: without it each mutant also
# builds the cdylib and examples/ring_bench.rs, twice the time for nothing the tests run.
# Property tests run PROPTEST_CASES=128 cases here instead of the policies' ~2000: the policy
# tests then take ~2 s instead of ~28 s (two shared cores), paid again by each of ~650 policy
# mutants, and a mutant is nearly always caught in the first cases or by an example test (the
# long runs are `make fuzz`'s job).
# Reports land in target/mutants/<module>/; CONTRIBUTING.md says what to do with a survivor.
MUTANTS_MODULES ?= policy ring event
MUTANTS_ARGS ?=
mutants:
	@command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
	@status=0; for module in $(MUTANTS_MODULES); do \
		echo "mutants of src/$$module/ against its own tests"; mkdir -p target/mutants/$$module; \
		CARGO_PROFILE_DEV_DEBUG=0 PROPTEST_CASES=128 cargo mutants --file "src/$$module/**" \
			--output target/mutants/$$module --cargo-arg=--lib $(MUTANTS_ARGS) \
			-- -- "$$module::" || status=1; \
	done; exit $$status

# The product on this machine: the gateway on the local driver, on 127.0.0.1:8000 unless
# HOST/PORT say otherwise. It prints the URLs and where its bearer token comes from. It needs
# only the runtime dependencies: none of the dev extras.
HOST ?= 127.0.0.1
PORT ?= 8000
# The walkthrough's server (`make demo`).
DEMO_PORT ?= 8765
serve: $(RUNTIME_STAMP)
	@$(BUILD_CORE)
	$(VENV)/bin/modal-workspace serve --driver local --host $(HOST) --port $(PORT)

# The README's walkthroughs in one command: the stand-in GitHub and a server set up to use it
# (the stand-in is the test suite's, so this takes the dev extras too).
demo: $(STAMP)
	@$(BUILD_CORE)
	$(PY) examples/demo.py --port $(DEMO_PORT)

clean:
	rm -rf $(VENV) target
