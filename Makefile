# The README's two set-up commands live here so CI runs exactly what a user runs.
PYTHON ?= python3

.PHONY: run test install install-test lint

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e .

install-test:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

# First command: install, then start the broker with its defaults.
run: install
	chute serve

# Second command: install what the tests need, lint, type-check, run every test.
test: install-test lint
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff format --check chute tests bench
	$(PYTHON) -m ruff check chute tests bench
	$(PYTHON) -m mypy
