# Every target installs what it needs into .venv first, so each works from a fresh checkout.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

$(STAMP): requirements.txt requirements-dev.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

## make demo: start the bundled sandbox, crawl it with every spider into ./demo-output, print a summary.
demo: $(STAMP)
	$(PY) -m mediacrawler demo --out demo-output

## make test: the whole suite (real redis-server and sandbox subprocesses on 127.0.0.1), in two pytest processes.
test: $(STAMP)
	$(PY) -m pytest -q -n 2

## make bench: the benchmarks under benchmarks/ (minutes; not part of make test).
bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) demo-output output .pytest_cache
