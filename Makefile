PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test chat bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make run: start the Discord bot (reads .env)
run: $(STAMP)
	$(BIN)/python -m bot

## make test: the whole test suite
test: $(STAMP)
	$(BIN)/python -m pytest

## make chat USER=alice: talk to the character in the terminal, no Discord needed
chat: $(STAMP)
	$(BIN)/python -m bot chat --user $(or $(USER_NAME),$(USER),you)

## make bench: print every bench's figures
bench: $(STAMP)
	$(BIN)/python bench/dedup.py
	$(BIN)/python bench/replace_guard.py
	$(BIN)/python bench/lore.py
	$(BIN)/python bench/recall.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/consolidation.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/streaming.py

clean:
	rm -rf $(VENV) .pytest_cache
