# Two commands: `make run` opens the console, `make test` runs every test.
# Both set up everything they need first, on a fresh Debian machine.
VENV    := .venv
PY      := $(VENV)/bin/python
SUDO    := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
PORT    ?= 8501
# Test processes (pytest-xdist). Three by default: at most two of them train at once, and the
# third runs light and clock-bound tests meanwhile (docs/testing.md). TEST_WORKERS=0 runs
# everything in this one process.
TEST_WORKERS ?= 3

.PHONY: run test test-fast system-deps bench clean help

# The real OpenID provider the sign-in tests start (panva's oidc-provider, tests/oidc): installed
# from the npm registry at the versions package-lock.json pins; node_modules is not committed.
OIDC    := tests/oidc

help:
	@echo "make run    - install and start the console on 127.0.0.1:$(PORT); prints the URL with its login token"
	@echo "make test   - install everything tests need (sshd, chromium) and run all tests"
	@echo "make test-fast - the same, without the tests that train TensorFlow (about 4 minutes)"
	@echo "make bench  - run the benchmarks in bench/"

# The pinned requirements, then this checkout itself, editable (pyproject.toml): that puts the
# `tfconsole` command in .venv/bin and makes `tfconsole` (the client library and the Python API),
# `backend` and `console` importable from any folder.
$(VENV)/.runtime: requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

$(OIDC)/node_modules/.installed: $(OIDC)/package.json $(OIDC)/package-lock.json | system-deps
	npm ci --prefix $(OIDC) --no-audit --no-fund --loglevel=error
	touch $@

# Debian packages the tests drive for real: OpenSSH server and client, Chromium, ps,
# ip/unshare/nsenter for the jump-host test's private network (rig/netns.py), and Slurm with
# munge for the one-node test cluster (rig/slurm.py; no systemd needed), and faketime for a
# console clock skewed from its hosts' (tests/watch/test_clock_skew.py), and rsync, the yardstick
# of bench/project_launch.py, and PostgreSQL, the team storage of sweeps (rig/postgres.py).
# Node with npm for the test OpenID provider (tests/oidc) in a check of its own: a machine may
# have Node from elsewhere (NodeSource's nodejs bundles npm and conflicts with Debian's npm).
system-deps:
	@if ! command -v /usr/sbin/sshd >/dev/null || ! command -v chromium >/dev/null || ! command -v ps >/dev/null \
	    || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null \
	    || ! command -v /usr/sbin/slurmctld >/dev/null || ! command -v /usr/sbin/slurmd >/dev/null \
	    || ! command -v sbatch >/dev/null || ! command -v /usr/sbin/munged >/dev/null \
	    || ! command -v faketime >/dev/null || ! command -v rsync >/dev/null \
	    || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q openssh-server openssh-client chromium procps \
	    iproute2 util-linux slurmctld slurmd slurm-client munge faketime rsync postgresql; \
	fi
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q nodejs npm; \
	fi

# A new login token at every start; the URL to open (with it) is printed once the console answers.
run: $(VENV)/.runtime
	$(PY) -m console --address 127.0.0.1 --port $(PORT)

test: $(VENV)/.dev system-deps $(OIDC)/node_modules/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests

# The developer's loop: every test but those that train TensorFlow (the `slow` marker), on the
# same real sshd, Chromium and Slurm parts; `make test` stays the one that says a change is done.
test-fast: $(VENV)/.dev system-deps $(OIDC)/node_modules/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow" --durations=10 tests

bench: $(VENV)/.dev system-deps
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) runs test-output $(OIDC)/node_modules
