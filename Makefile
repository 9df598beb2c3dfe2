# tailtap: two commands do all set-up on a fresh machine.
#   make demo   venv + install + analyze a bundled lab sample + print the report (methods, spikes, causes)
#   make test   system packages the tests use (apt-get, when root) + venv + lint + the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SAMPLE ?= samples/loss_burst/capture.pcap
DEMO_STORE ?= out/demo-store
# command:package pairs; a package is installed only when its command is missing (a machine
# with NodeSource's nodejs has npm without Debian's npm package, and the two conflict)
APT_PACKAGES := tshark:tshark editcap:wireshark-common tcpdump:tcpdump ip:iproute2 ps:procps
# real-stack tests (tests/test_real_stacks.py): grpc-js runs on nodejs; curl and
# nghttp2's h2load are clients
APT_PACKAGES += node:nodejs npm:npm curl:curl h2load:nghttp2-client
# the HTML report's tests open it in headless Chromium through chromedriver
APT_PACKAGES += chromium:chromium chromedriver:chromium-driver
# the daemon's tests scrape it with a real Prometheus and lint /metrics with promtool
APT_PACKAGES += prometheus:prometheus promtool:prometheus
NODE_DIR := tests/node

.PHONY: demo test venv system-deps node-deps lint bench bench-users sweep sweep-report fuzz soak clean damaged capture-drops

$(BIN)/tailtap: pyproject.toml $(wildcard parsers/*/_speedups.c parsers/*.h parsers/*/*.h)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@# bytecode, as a regular install has it: where PYTHONDONTWRITEBYTECODE is set, an
	@# editable install would compile every module at every start (~0.1 s)
	$(BIN)/python -m compileall -q parsers telemetry
	@touch $@

venv: $(BIN)/tailtap

demo: venv
	$(BIN)/tailtap analyze $(SAMPLE) --out $(DEMO_STORE) --force

# Installs tshark/tcpdump with apt-get when they are missing and we are root; otherwise
# the tests that need them say what is missing and skip.
system-deps:
	@missing=""; for cp in $(APT_PACKAGES); do \
	  command -v $${cp%%:*} >/dev/null 2>&1 || missing="$$missing $${cp#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "not root: cannot install$$missing (tests needing them will skip)"; fi; \
	fi

# The Node.js packages of the real-stack tests (grpc-js), exactly as locked, into tests/node
node-deps: $(NODE_DIR)/node_modules/.package-lock.json

$(NODE_DIR)/node_modules/.package-lock.json: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix $(NODE_DIR) --no-audit --no-fund --loglevel=error; \
	else echo "npm missing: cannot install $(NODE_DIR) (the grpc-js test will skip)"; fi

lint: venv
	$(BIN)/ruff check parsers telemetry tests bench fuzz

test: system-deps venv node-deps lint
	$(BIN)/pytest -q -ra

bench: venv
	$(BIN)/python bench/bench_pipeline.py

# What users run (analyze with its report, report, sql, the ingest alone) against tshark on
# realistic traffic (200k, 1M, 10M packets), the lab's captures and the ideal capture:
# bench/results/users.md (takes about an hour; tshark needs ~7 GB for 10M packets).
BENCH_CAPTURES ?= out/bench-captures
bench-users: venv
	$(BIN)/python bench/bench_users.py --cache $(BENCH_CAPTURES)

# The randomized lab sweep (root; about 3 hours for 90 runs): each run's network, load,
# capture point and impairment drawn from ranges (telemetry/lab/sweep.py), split into
# tuning and held-out runs before scoring. sweep-report scores every run against the
# client's own timings (stores kept in $(SWEEP_DIR)-stores: after a change of queries/
# only the SQL runs again, a few minutes) and writes the tables into the README,
# bench/results/sweep*.
SWEEP_DIR ?= out/sweep
SWEEP_SEED ?= 1
SWEEP_RUNS ?= 90
SWEEP_RANGES ?= 1
SWEEP_DIRS ?= $(SWEEP_DIR)
SWEEP_STORES ?= $(SWEEP_DIR)-stores
sweep: venv
	$(BIN)/tailtap lab sweep --out $(SWEEP_DIR) --seed $(SWEEP_SEED) --runs $(SWEEP_RUNS) --ranges $(SWEEP_RANGES)
	$(MAKE) sweep-report

sweep-report: venv
	@mkdir -p bench/results
	nice $(BIN)/tailtap lab sweep-report $(SWEEP_DIRS) --stores $(SWEEP_STORES) --readme README.md \
	  --json bench/results/sweep.json --csv bench/results/sweep_runs.csv --diagnosis bench/results/sweep_diagnosis.md

# Coverage-guided fuzzing (atheris) of every target, 10^6 inputs in all (about an hour on
# 2 cores), in processes of 20,000 inputs at most (fuzz/__main__.py says why); a crash's
# input lands in fuzz/regressions/<target>/, which the tests replay.
# The results of the last run: bench/results/fuzz.md.
FUZZ_RUNS ?= hpack:400000 tls:300000 session:200000 capture:100000 sse_rows:100000 h2_events:100000 llm_shapes:200000 json_top:200000
fuzz: venv
	@for tr in $(FUZZ_RUNS); do echo "fuzz $${tr%%:*}: $${tr#*:} inputs"; log=$${TMPDIR:-/tmp}/tailtap-fuzz-$${tr%%:*}.log; \
	  $(BIN)/python -m fuzz $${tr%%:*} -runs=$${tr#*:} -print_final_stats=1 > $$log 2>&1; code=$$?; \
	  grep -E "^(fuzz |Done|stat::number_of_executed_units|stat::peak_rss_mb|==|ERROR)" $$log; \
	  [ $$code -eq 0 ] || { echo "fuzz $${tr%%:*} failed (exit $$code): $$log"; exit 1; }; done

# `tailtap analyze` over damaged copies of every sample and shared pcap capture (packets
# dropped, duplicated, reordered, stamped 1970, flipped, cut...): none may exit with a
# traceback, outgrow 4 GiB or 300 s (fuzz/damaged.py). Results: bench/results/damaged.md.
DAMAGED_COPIES ?= 2
damaged: venv
	$(BIN)/python -m fuzz.damaged bench/results/damaged.md --copies $(DAMAGED_COPIES) \
	  samples/*/capture.pcap $${TAILTAP_SHARED_CAPTURES:-../shared/captures}/*.pcap

# Verdicts of the samples and the lab sweep's samples with packets taken out as a capture
# drops them (1 in 200, 1 in 50, 5 runs of 50), against each complete capture's
# (bench/capture_drops.py; needs editcap for the pcapng ones). Results:
# bench/results/capture_drops.md.
capture-drops: venv
	$(BIN)/python bench/capture_drops.py bench/results/capture_drops.md samples/*/capture.pcap samples/sweep/*/capture.pcap

# The daemon under continuous gRPC load for 5 minutes (root, tcpdump): RSS sampled every
# second, flat or it fails; the figures go to bench/results/soak.json (CI soaks 60 s)
SOAK_SECONDS ?= 300
soak: system-deps venv
	@mkdir -p bench/results
	TAILTAP_SOAK_SECONDS=$(SOAK_SECONDS) TAILTAP_SOAK_REPORT=bench/results/soak.json \
	  $(BIN)/pytest -q -ra tests/test_daemon_hardening.py -k soak

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache *.egg-info $(NODE_DIR)/node_modules
