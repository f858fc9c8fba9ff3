# sglx: `make help` lists the targets. ARCH defaults to cpu, the reference architecture.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ARCH ?= cpu
VENV ?= .venv
export VENV
BIN := $(VENV)/bin
SGLX := $(BIN)/sglx
PYTEST_ARGS ?=
# make test's pytest-xdist workers. 2 (the default): the e2e module on one, the unit and engine
# tests beside it on the other, niced; 1: none, the cpu image chain built in a thread beside the
# unit tests (tests/helpers/worker_schedule.py orders the run either way, and says what each
# took on CI's two cores).
TEST_WORKERS ?= 2
BENCH ?= image
# Every arch profile's name (images/*/arch.yaml), asked of sglx when a recipe needs it.
ARCHES = $(or $(shell $(SGLX) arch list --json | $(BIN)/python -c 'import json,sys; print(" ".join(a["arch"] for a in json.load(sys.stdin)["data"]["arches"]))'),$(error sglx arch list named no arch: run make setup, then this again))

.PHONY: help setup test e2e lint lint-static lock-check unit docs validate image prune bundle bench rollout check-hosts

help: ## List the targets
	@echo "sglx make targets (ARCH=$(ARCH); override with ARCH=gfx942 and so on):"
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) \
	  | awk 'BEGIN {FS = ":.*## "} {printf "  %-12s %s\n", $$1, $$2}'

setup: ## Install Debian packages, start dockerd if no engine answers, create the venv
	@bash scripts/bootstrap.sh

image: setup ## Build the serving image for ARCH: wheels fetched if missing, base ensured, demo model if no MODEL=DIR
	$(SGLX) wheels fetch --arch $(ARCH)
	$(SGLX) base ensure --arch $(ARCH)
	$(SGLX) image build --arch $(ARCH) $(if $(MODEL),--model $(MODEL)) $(if $(TAG),--tag $(TAG))

prune: ## Remove sglx's build leftovers (deps stages, unused payloads) of ARCH if given, else all
	$(SGLX) image prune $(if $(filter command line environment,$(origin ARCH)),--arch $(ARCH))

bundle: setup ## Write the air-gapped bundle of ARCH's image (OUT=DIR, IMAGE=REF, SIGN=KEY, TAR=1, CHUNK=SIZE)
	$(SGLX) bundle create --arch $(ARCH) $(if $(OUT),--out $(OUT)) $(if $(IMAGE),--image $(IMAGE)) \
	  $(if $(SIGN),--sign $(SIGN)) $(if $(TAR),--tar) $(if $(CHUNK),--chunk-size $(CHUNK))

bench: setup ## Run a benchmark: BENCH=image|scan|weights|bundle (kernels need a GPU: see bench/README.md)
	$(BIN)/python bench/$(BENCH)/bench_$(BENCH).py

# Lint runs beside the tests (its output follows theirs): the tests' first minutes wait on the
# network (debootstrap, the wheel fetch), not on the cores lint takes. Fails if either fails.
# Beside them it is lint-static: lint's shellcheck of install.sh is a unit test the suite runs.
test: setup ## Lint beside unit, real-engine integration and the Ansible end-to-end run with its break cases
	@lint_log=$$(mktemp -t sglx-lint.XXXXXX); \
	nice -n 10 $(MAKE) --no-print-directory lint-static >"$$lint_log" 2>&1 & lint_pid=$$!; \
	tests_rc=0; $(BIN)/pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS) || tests_rc=$$?; \
	lint_rc=0; wait $$lint_pid || lint_rc=$$?; \
	echo "make test: lint, run beside the tests:"; cat "$$lint_log"; rm -f "$$lint_log"; \
	if [ $$lint_rc -ne 0 ]; then echo "make test: lint failed (exit $$lint_rc): fix what it names above" >&2; fi; \
	if [ $$tests_rc -ne 0 ]; then exit $$tests_rc; fi; exit $$lint_rc

e2e: setup ## The Ansible end-to-end run alone: site, host checks, rollout, three breaks named and repaired, rollback
	$(BIN)/pytest -m e2e tests/e2e $(PYTEST_ARGS)

lock-check: setup ## Re-resolve every arch's lock against the index at its recorded cutoff (needs the index; the suite checks the cpu lock offline)
	for arch in $(ARCHES); do $(SGLX) wheels lock --arch $$arch --check; done

unit: ## Run the unit tests only (no Docker engine needed)
	@SGLX_NO_ENGINE=1 bash scripts/bootstrap.sh
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

lint: lint-static ## lint-static, then shellcheck of the install.sh sglx renders
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/bundle/test_install_sh_shellcheck.py

lint-static: setup ## ruff (lint and format check), mypy, the import layering contracts, ansible-lint (production profile), promtool, and the drift checks of the Ansible vars, Prometheus rules, Grafana dashboard and bundle.json schema
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	cd ansible && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/ansible-lint -q
	for arch in $(ARCHES); do \
	  $(SGLX) ansible vars --arch $$arch --out ansible/inventory/example/group_vars/$$arch/sglx_profile.yml --check; done
	$(SGLX) ansible rules --out ansible/prometheus/sglx.rules.yml --check
	$(SGLX) ansible dashboard --out ansible/prometheus/sglx.dashboard.json --check
	$(SGLX) bundle schema --out bundles/bundle.schema.json --check
	promtool check rules ansible/prometheus/sglx.rules.yml

rollout: setup ## Roll BUNDLE (a folder on the hosts) out to INVENTORY's hosts of ARCH, one at a time (ansible/rollout.yml)
	@test -n "$(INVENTORY)" || { echo "make rollout: set INVENTORY=FILE (see ansible/inventory/example)" >&2; exit 2; }
	@test -n "$(BUNDLE)" || { echo "make rollout: set BUNDLE=DIR, the bundle folder on the hosts" >&2; exit 2; }
	cd ansible && $(abspath $(BIN))/ansible-playbook -i $(abspath $(INVENTORY)) rollout.yml \
	  -e sglx_hosts=$(ARCH) -e sglx_bundle_path=$(BUNDLE) $(if $(SRC),-e sglx_bundle_src=$(abspath $(SRC)))

check-hosts: setup ## Host checks of INVENTORY's hosts: MODE=preflight|acceptance, ARCH=, BUNDLE=DIR, JUNIT=FILE
	@test -n "$(INVENTORY)" || { echo "make check-hosts: set INVENTORY=FILE (see ansible/inventory/example)" >&2; exit 2; }
	$(SGLX) hosts check -i $(INVENTORY) --mode $(or $(MODE),preflight) \
	  $(if $(filter command line environment,$(origin ARCH)),--arch $(ARCH)) \
	  $(if $(BUNDLE),--bundle $(BUNDLE)) $(if $(JUNIT),--junitxml $(JUNIT)) $(if $(LIMIT),--limit $(LIMIT))

docs: setup ## Regenerate docs/reference/profile.md and images/*/Dockerfile from their sources
	$(SGLX) arch schema > docs/reference/profile.md.tmp
	mv docs/reference/profile.md.tmp docs/reference/profile.md
	$(SGLX) image render

validate: setup ## Validate every arch profile against the schema
	$(SGLX) arch validate
