# Every target installs what it needs into .venv first, so each works from a fresh checkout.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install postgres browser demo test bench clean

$(STAMP): requirements.txt requirements-dev.txt setup.py mediacrawler_sandbox/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

## make demo: start the platform sandbox (mediacrawler_sandbox/, installed editable by requirements-dev.txt), crawl
## it with every spider into ./demo-output, print a summary.
demo: $(STAMP)
	$(PY) -m mediacrawler demo --out demo-output

## make postgres: a PostgreSQL server's binaries for the records tests (tests/plugins/postgres_server.py starts a
## throwaway one): Debian's package where we run as root with apt; elsewhere those tests skip and say why.
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make postgres: apt-get install postgresql (for the records tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    postgresql >/dev/null; } || echo "make postgres: not installed; the PostgreSQL tests will skip"; \
	else echo "make postgres: no PostgreSQL and no apt-get as root; the PostgreSQL tests will skip"; fi

## make browser: Debian's chromium, its chromedriver and a CJK font for the browser tests of mediacrawler web
## (tests/test_web_browser.py), where we run as root with apt; elsewhere those tests skip and say why.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make browser: apt-get install chromium chromium-driver fonts-wqy-zenhei (for the web tests)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver fonts-wqy-zenhei >/dev/null; } || echo "make browser: not installed; the browser tests will skip"; \
	else echo "make browser: no chromium and no apt-get as root; the browser tests will skip"; fi

## make test: the whole suite (real redis-server, PostgreSQL and sandbox subprocesses on 127.0.0.1), in three pytest
## processes; the 25 slowest tests are listed at the end.
test: $(STAMP) postgres browser
	$(PY) -m pytest -q -n 3 --durations=25

## make bench: the benchmarks under benchmarks/ (minutes; not part of make test).
bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) demo-output output .pytest_cache
