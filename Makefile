# The README's two set-up commands live here so CI runs exactly what a user runs.
# Everything installs into a project virtual environment (.venv), so the commands
# work on a Debian python that refuses system-wide installs (PEP 668).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test test-fast test-unit test-integration test-heavy test-stress install install-test lint demo java chromium tinyproxy etcd venv

java:
	sh scripts/ensure-java.sh

# The web console's browser test drives Debian's chromium (never a downloaded browser).
chromium:
	sh scripts/ensure-chromium.sh

# The native-over-HTTP test puts Debian's tinyproxy between a client and the broker.
tinyproxy:
	sh scripts/ensure-tinyproxy.sh

# The cluster tests start Debian's etcd (etcd-server, v3 API) on loopback.
etcd:
	sh scripts/ensure-etcd.sh

venv:
	sh scripts/ensure-venv.sh $(PYTHON) $(VENV)

install: java venv
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[spark]'

install-test: java chromium tinyproxy etcd venv
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'

# First command: install, then chute's main job: the broker with its journal (in
# ./chute-data, on its default ports), the Spark demo pipeline against it for
# DEMO_SECONDS, and the broker serving on until Ctrl-C.
DEMO_SECONDS ?= 60
run: install
	$(PY) examples/demo.py --serve --seconds $(DEMO_SECONDS)

# Second command: install what the tests need, lint, type-check, run every test.
# One pytest run (README, "Running the tests"), in lanes: TEST_WORKERS processes
# (pytest-xdist) share out the unit and integration tests, while the Spark tests run in
# three lanes (tests/conftest.py), each on one worker, one test after another, and every
# crash test likewise on one: those four lanes start first, so they never hold up the
# end, and each worker takes from the rest once its lane is done (most of their time
# goes on waiting: brokers, micro-batches, timeouts). TEST_WORKERS=0 runs it serially.
# Its output ends in pytest's summary.
TEST_WORKERS ?= 4
XDIST = -n $(TEST_WORKERS) --dist loadgroup
test: install-test lint
	$(PY) -m pytest -q $(XDIST) --durations=30

# Fast local feedback (under 3 minutes, no lint): the unit tests not marked slow, with a
# fifth of the examples per property, and a subset of the integration tests: the client
# API over TCP (and the dropbox), delivery, hostile input and the command line, each on a
# real broker.
FAST_INTEGRATION = tests/integration/test_client_api.py tests/integration/test_delivery.py \
	tests/integration/test_protocol_errors.py tests/integration/test_cli.py
FAST = not slow and not spark and not crash and not acceptance
test-fast:
	$(PY) -m pytest -q $(XDIST) --hypothesis-profile=fast -m '$(FAST)' \
		-k 'not test_client_api or tcp or files' tests/unit $(FAST_INTEGRATION)

# One lane at a time.
test-unit:
	$(PY) -m pytest -q $(XDIST) tests/unit
test-integration:
	$(PY) -m pytest -q $(XDIST) tests/integration -m 'not spark and not crash'
test-heavy:
	$(PY) -m pytest -q -n 3 --dist loadgroup -m 'spark or crash'

# The client contract suite and the TLS and WebSocket tests, STRESS_RUNS times in a
# row under two CPU burners, stopping at the first failure.
STRESS_RUNS ?= 10
test-stress:
	PY=$(PY) bash scripts/stress_tests.sh $(STRESS_RUNS)

# The blocking client is written from the asyncio one (scripts/unasync.py): the
# check fails if a blocking module differs from what its asyncio source makes.
lint:
	$(PY) scripts/unasync.py --check
	$(PY) -m ruff format --check chute tests bench
	$(PY) -m ruff check chute tests bench
	$(PY) -m mypy

# The Spark demo alone (docs/spark.md): a throw-away broker, order producer, streaming
# job and consumer, for DEMO_SECONDS.
demo: install
	$(PY) examples/demo.py --seconds $(DEMO_SECONDS)
