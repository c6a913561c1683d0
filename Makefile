PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every dependency pinned, dev tools included: `make lock` writes it again from pyproject.toml.
LOCK := requirements.lock
# The tests keep their bytecode and pytest's rewritten asserts (in __pycache__, ignored by git)
# even where the environment says not to write any: each worker would otherwise compile the
# 200 test modules again on every run, seconds of each run.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

# The real model server of tests/real_server/ (llama.cpp's llama-server and SmolLM2-135M), built
# once into a cache outside the repository: about 8 minutes on 2 cores the first time.
LLAMA_DIR ?= $(HOME)/.cache/echo/llama-server-0.3.36
LLAMA := LLAMA_SERVER=$(LLAMA_DIR)/llama-server LLAMA_MODEL=$(LLAMA_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: run test test-fast lint lock chat doctor bench clean llama-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# pip check: a dependency added to pyproject.toml but not to the lock stops here, named.
$(STAMP): $(BIN)/python pyproject.toml $(LOCK)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

## make lock: pin every dependency again after pyproject.toml changed
# Not after $(STAMP): its pip check stops on the very dependency the new lock is to add.
lock: $(BIN)/python
	$(BIN)/python -m pip install --quiet -r $(LOCK)
	$(BIN)/pip-compile --quiet --extra dev --strip-extras --no-emit-index-url --no-emit-find-links -o $(LOCK) pyproject.toml

## make run: start the Discord bot (reads .env)
run: $(STAMP)
	$(BIN)/python -m bot

## make lint: ruff's rules and its formatter over the tree, mypy strict over bot/ and cogs/
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## make llama-server: build the real-server lane's llama-server and fetch its model (once)
llama-server: $(STAMP)
	tests/real_server/build_llama_server.sh $(LLAMA_DIR) $(BIN)/python

## make test: the checkers, the real-server lane's server (built once), then the whole test suite
## on two workers, its ten slowest tests shown
test: lint llama-server
	$(LLAMA) $(PYTEST) -n 2 --dist worksteal --durations=10

## make test-fast: the checkers, then every test but the slow ones (processes, PostgreSQL),
## property tests with fewer examples, on two workers
test-fast: lint
	HYPOTHESIS_PROFILE=fast $(PYTEST) -m "not slow" -n 2 --durations=10

## make chat USER_NAME=alice: talk to the character in the terminal, no Discord needed (as your
## login name by default: a name, since the character puts it in its sentences)
chat: $(STAMP)
	$(BIN)/python -m bot chat --user $(or $(USER_NAME),$(USER),$(shell id -un))

## make doctor: check the settings, database, LLM, embedder and Discord, one line each
doctor: $(STAMP)
	$(BIN)/python -m bot doctor

## make bench: print every bench's figures
bench: $(STAMP)
	$(BIN)/python bench/dedup.py
	$(BIN)/python bench/replace_guard.py
	$(BIN)/python bench/lore.py
	$(BIN)/python bench/sillytavern.py
	$(BIN)/python bench/recall_public.py
	$(BIN)/python bench/recall.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/consolidation.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/load.py --serial
	$(BIN)/python bench/prompt_cache.py
	$(BIN)/python bench/streaming.py
	$(BIN)/python bench/import_load.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
