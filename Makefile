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
BENCH ?= image

.PHONY: help setup test lint unit docs validate image bench

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

bench: setup ## Run a benchmark: BENCH=image|scan|weights (kernels need a GPU: see bench/README.md)
	$(BIN)/python bench/$(BENCH)/bench_$(BENCH).py

test: setup lint ## Lint, then run every test (unit and real-engine integration)
	$(BIN)/pytest $(PYTEST_ARGS)

unit: ## Run the unit tests only (no Docker engine needed)
	@SGLX_NO_ENGINE=1 bash scripts/bootstrap.sh
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

lint: setup ## ruff (lint and format check) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

docs: setup ## Regenerate docs/reference/profile.md and images/*/Dockerfile from their sources
	$(SGLX) arch schema > docs/reference/profile.md.tmp
	mv docs/reference/profile.md.tmp docs/reference/profile.md
	$(SGLX) image render

validate: setup ## Validate every arch profile against the schema
	$(SGLX) arch validate
