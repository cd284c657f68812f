# The two entry points the README promises: `make serve` (the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,train]'
	touch $(STAMP)

install: $(STAMP)

# Until the server and the default voice exist, the main job is the engine demo:
# plain vs speculative decoding on the shipped tiny models, checked token for token.
serve: $(STAMP)
	$(BIN)/voicespec demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
