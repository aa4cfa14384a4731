# The README's two set-up commands live here so CI runs exactly what a user runs.
PYTHON ?= python3

.PHONY: run test install install-test lint demo java

java:
	sh scripts/ensure-java.sh

install: java
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[spark]'

install-test: java
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

# First command: install, then chute's main job: the broker with its journal (in
# ./chute-data, on its default ports), the Spark demo pipeline against it for
# DEMO_SECONDS, and the broker serving on until Ctrl-C.
DEMO_SECONDS ?= 60
run: install
	$(PYTHON) examples/demo.py --serve --seconds $(DEMO_SECONDS)

# Second command: install what the tests need, lint, type-check, run every test.
test: install-test lint
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff format --check chute tests bench
	$(PYTHON) -m ruff check chute tests bench
	$(PYTHON) -m mypy

# The Spark demo alone (docs/spark.md): a throw-away broker, order producer, streaming
# job and consumer, for DEMO_SECONDS.
demo: install
	$(PYTHON) examples/demo.py --seconds $(DEMO_SECONDS)
