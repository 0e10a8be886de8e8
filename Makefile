# Entry points. README documents `make plan` (first look) and `make test` (everything CI runs).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Molecule scenarios, run in this order (a directory without molecule.yml is not a scenario); those in
# PARALLEL_SCENARIOS run beside the others (scripts/molecule-all.sh says why).
SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
export PARALLEL_SCENARIOS ?= deploy_multinode

.PHONY: setup system-deps plan demo demo-down test lint unit integration molecule bench

setup: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt scripts/setup-venv.sh
	VENV=$(VENV) scripts/setup-venv.sh

system-deps:
	scripts/install-system-deps.sh

## First command of the quick start: the Kimi-K2.5-NVFP4 plan on the bundled 8x RTX PRO 6000 profile.
plan: setup
	ansible-playbook playbooks/plan.yml

## The main command on an embedded default: deploy_tiny.yml into a local systemd container, from an olah
## mirror, to a verified endpoint that stays up (remove it with `make demo-down`).
demo: setup system-deps
	scripts/demo.sh up

demo-down:
	scripts/demo.sh down

## Second command: every test CI runs.
test: setup system-deps lint unit integration molecule

lint: setup
	ruff check .
	ruff format --check .
	yamllint --strict .
	ansible-lint

unit: setup
	pytest -q tests/unit

integration: setup
	pytest -q tests/integration

molecule: setup system-deps
	scripts/molecule-all.sh $(SCENARIOS)

bench: setup system-deps
	@for b in $(sort $(wildcard tests/bench/*.sh)); do echo "=== $$b"; $$b; done
