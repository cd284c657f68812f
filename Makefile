# The two entry points the README promises: `make serve` (the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-all
SERVE_STAMP := $(VENV)/.installed-serve

.PHONY: serve test test-fast install clean gpu-wheels

# Serving needs the core and the `serve` extra only; the tests need every extra (training, eval, bench).
$(SERVE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77'
	$(BIN)/pip install -q -e '.[serve]'
	touch $(SERVE_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77'
	$(BIN)/pip install -q -e '.[all,test]'
	touch $(STAMP) $(SERVE_STAMP)

install: $(STAMP)

# The main job: the WebSocket TTS server with the shipped default voice (player on http://127.0.0.1:8765/).
serve: $(SERVE_STAMP)
	$(BIN)/voicespec serve --host 127.0.0.1 --port 8765

# PYTHONNODEBUGRANGES: no column tables, so tracebacks formatted on the servers' threads never call
# ast.parse, which in CPython 3.11 races with pytest's own parsing (gh-106905; see tests/conftest.py).
# One pytest-xdist worker a CPU (at most 4: each holds its own voices); tests that share a Ray
# cluster name one xdist_group, so one worker runs them in turn.
XDIST := -n auto --maxprocesses 4 --dist loadgroup
test: $(STAMP)
	PYTHONNODEBUGRANGES=1 $(BIN)/python -m pytest -q $(XDIST)

# The fast tier (under 2 minutes on 2 cores): everything but the tests marked slow.
test-fast: $(STAMP)
	PYTHONNODEBUGRANGES=1 $(BIN)/python -m pytest -q $(XDIST) -m "not slow"

# Wheels of the dependencies a device machine lacks (it has torch and transformers, no network):
# carry .gpu-wheels with the call that runs scripts/gpu-check.sh.
gpu-wheels: $(STAMP)
	$(BIN)/pip download -q --no-deps -d .gpu-wheels encodec websockets soundfile gruut gruut-lang-en gruut-ipa \
		prometheus-client num2words python-crfsuite jsonlines dateparser babel

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
