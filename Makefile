# Entry points. README documents `make plan` (first look) and `make test` (everything CI runs).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Molecule scenarios, run in this order (a directory without molecule.yml is not a scenario); those in
# PARALLEL_SCENARIOS run one after another beside the others (scripts/molecule-all.sh says why).
SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
export PARALLEL_SCENARIOS ?= deploy_multinode vllm_service
# Every stage runs through the timer; pytest lists its 15 slowest tests.
TIME := scripts/stage-time.sh
PYTEST_DURATIONS := --durations=15
# Two pytest processes for the integration tests (pytest-xdist; one file stays in one process, so its
# module fixtures are built once): a test mostly waits on ansible-playbook, olah or pip.
INTEGRATION_WORKERS ?= 2
PYTEST_XDIST = $(if $(filter-out 0 1,$(INTEGRATION_WORKERS)),-n $(INTEGRATION_WORKERS) --dist loadfile)

.PHONY: setup system-deps plan demo demo-down test check times-reset lint unit integration integration-fast molecule bench

setup: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt scripts/setup-venv.sh
	VENV=$(VENV) $(TIME) setup scripts/setup-venv.sh

system-deps:
	$(TIME) system-deps scripts/install-system-deps.sh

## First command of the quick start: the Kimi-K2.5-NVFP4 plan on the bundled 8x RTX PRO 6000 profile.
plan: setup
	ansible-playbook playbooks/plan.yml

## The main command on an embedded default: deploy_tiny.yml into a local systemd container, from an olah
## mirror, to a verified endpoint that stays up (remove it with `make demo-down`).
demo: setup system-deps
	scripts/demo.sh up

demo-down:
	scripts/demo.sh down

## Second command: every test CI runs. Each stage prints its wall time when it ends; the table of all of them
## (molecule's actions included) comes last (scripts/stage-time.sh, .cache/stage-times.tsv).
test: times-reset setup system-deps lint unit integration molecule
	@scripts/stage-time.sh --report

## Quick tier for people (not CI): lint, unit and the fast integration tests, no containers, no engine start-up.
check: times-reset setup lint unit integration-fast
	@scripts/stage-time.sh --report

times-reset:
	@mkdir -p .cache && scripts/stage-time.sh --reset

lint: setup
	$(TIME) "lint ruff" bash -c 'ruff check . && ruff format --check .'
	$(TIME) "lint yamllint" yamllint --strict .
	$(TIME) "lint ansible-lint" ansible-lint
	$(TIME) "lint sanity" scripts/sanity.sh

unit: setup
	$(TIME) unit pytest -q $(PYTEST_DURATIONS) tests/unit

integration: setup
	$(TIME) integration pytest -q $(PYTEST_DURATIONS) $(PYTEST_XDIST) tests/integration

## The integration tests that start no service (olah, vLLM): those not marked `slow`.
integration-fast: setup
	$(TIME) integration-fast pytest -q $(PYTEST_DURATIONS) $(PYTEST_XDIST) -m "not slow" tests/integration

molecule: setup system-deps
	scripts/molecule-all.sh $(SCENARIOS)

bench: setup system-deps
	@for b in $(sort $(wildcard tests/bench/*.sh)); do echo "=== $$b"; $$b; done
