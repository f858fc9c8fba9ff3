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

.PHONY: help setup test lint unit docs validate

help: ## List the targets
	@echo "sglx make targets (ARCH=$(ARCH); override with ARCH=gfx942 and so on):"
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) \
	  | awk 'BEGIN {FS = ":.*## "} {printf "  %-12s %s\n", $$1, $$2}'

setup: ## Install Debian packages, start dockerd if no engine answers, create the venv
	@bash scripts/bootstrap.sh

test: setup lint ## Lint, then run every test (unit and real-engine integration)
	$(BIN)/pytest $(PYTEST_ARGS)

unit: ## Run the unit tests only (no Docker engine needed)
	@SGLX_NO_ENGINE=1 bash scripts/bootstrap.sh
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

lint: setup ## ruff (lint and format check) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

docs: setup ## Regenerate docs/reference/profile.md from the profile schema
	$(SGLX) arch schema > docs/reference/profile.md.tmp
	mv docs/reference/profile.md.tmp docs/reference/profile.md

validate: setup ## Validate every arch profile against the schema
	$(SGLX) arch validate
