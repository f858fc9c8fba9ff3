#!/usr/bin/env bash
# Prepare this machine for sglx: Debian packages, a running Docker engine and the project venv.
#
# Idempotent and quick when nothing changed; every action it takes is printed. Used by
# `make setup` (so by every make target that needs the venv) and by .ci/run.
#
#   VENV=.venv        where the project venv lives
#   PYTHON=python3    interpreter for the venv (3.11 or newer)
#   SGLX_NO_ENGINE=1  skip the Docker engine (unit tests only)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/sglx-dockerd.log}
# Debian packages the tool and its tests use: the engine, debootstrap for the cpu base,
# pax-utils (lddtree), the baseline bench/scan compares against, and the site registry's
# docker-registry and skopeo (role sglx_registry, tests/integration/test_site_registry.py),
# prometheus for its promtool (the rules' checks and tests; its daemon is not started), and the
# linter shellcheck for the install.sh sglx renders (tests/unit/bundle/test_install_sh_shellcheck.py),
# and busybox, whose sh is one of the three install.sh runs under in the tests (with dash and
# bash).
APT_PACKAGES=(docker.io debootstrap pax-utils skopeo docker-registry prometheus shellcheck busybox)

# cosign, the verifier a site's reviewers run on sglx's Sigstore bundles (the attestation tests
# run it as they would): Debian ships it in sid only. It comes from there with apt's own
# machinery and a private sources list and state, so this machine's apt sources stay as they are.
SID_PACKAGES=(cosign)
SID_MIRROR=${SID_MIRROR:-http://deb.debian.org/debian}

say() { printf 'bootstrap: %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 2; }

# The packages among the arguments that dpkg does not have installed, one per line.
not_installed() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || printf '%s\n' "$pkg"
  done
}

ensure_apt_packages() {
  local missing=()
  mapfile -t missing < <(not_installed "${APT_PACKAGES[@]}")
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}"
  say "installing Debian packages: ${missing[*]}"
  # Packages install their services without starting them: sglx starts the engine itself, and
  # only needs prometheus's promtool (policy-rc.d, Debian's invoke-rc.d policy; a site's own
  # policy is left as it was).
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
  fi
  local rc=0
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null; } || rc=$?
  [ "$own_policy" = 0 ] || rm -f "$policy"
  [ "$rc" = 0 ] || die "apt-get could not install ${missing[*]} (exit $rc)"
}

ensure_sid_packages() {
  local missing=()
  mapfile -t missing < <(not_installed "${SID_PACKAGES[@]}")
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing Debian sid packages: ${missing[*]}; run as root"
  say "installing from Debian sid ($SID_MIRROR): ${missing[*]}"
  local dir rc=0
  dir=$(mktemp -d /tmp/sglx-sid.XXXXXX)
  mkdir -p "$dir/lists/partial" "$dir/archives/partial"
  printf 'deb %s sid main\n' "$SID_MIRROR" >"$dir/sources.list"
  local apt=(apt-get -qq -o "Dir::Etc::SourceList=$dir/sources.list"
    -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$dir/lists"
    -o "Dir::Cache::Archives=$dir/archives")
  { "${apt[@]}" update && (cd "$dir" && "${apt[@]}" download "${missing[@]}") \
    && dpkg -i "$dir"/*.deb >/dev/null; } || rc=$?
  rm -rf "$dir"
  [ "$rc" = 0 ] || die "could not install ${missing[*]} from Debian sid (exit $rc)"
}

engine_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_engine() {
  if [ "${SGLX_NO_ENGINE:-0}" = 1 ]; then
    say "SGLX_NO_ENGINE=1: not checking for a Docker engine"
    return 0
  fi
  if engine_answers; then
    say "Docker engine answers (server $(docker version --format '{{.Server.Version}}'))"
    return 0
  fi
  [ -n "${DOCKER_HOST:-}" ] && die "DOCKER_HOST=$DOCKER_HOST does not answer; start that engine or unset DOCKER_HOST"
  [ "$(id -u)" -eq 0 ] || die "no Docker engine answers and starting dockerd needs root"
  command -v dockerd >/dev/null || die "dockerd not found after installing docker.io"
  say "no Docker engine answers: starting dockerd (storage driver overlay2, log $DOCKERD_LOG)"
  nohup dockerd --storage-driver overlay2 >"$DOCKERD_LOG" 2>&1 &
  for _ in $(seq 60); do
    engine_answers && { say "dockerd is up (pid $(pgrep -xo dockerd))"; return 0; }
    sleep 1
  done
  tail -n 20 "$DOCKERD_LOG" >&2 || true
  die "dockerd did not answer within 60 s (log above, full log in $DOCKERD_LOG)"
}

# pip's own output goes to a log, shown only when pip fails.
pip_quietly() {
  local log="$VENV/pip.log"
  "$VENV/bin/python" -m pip "$@" >"$log" 2>&1 || {
    tail -n 40 "$log" >&2
    die "pip $* failed (full log: $log)"
  }
}

ensure_venv() {
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); sglx needs Python 3.11 or newer (set PYTHON=)"
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating the venv in $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  # Reinstall only when a file that defines the environment changed.
  local stamp="$VENV/.sglx-setup" want
  want=$(cat pyproject.toml plugin/pyproject.toml runtime/pyproject.toml kernels/pyproject.toml \
         scripts/bootstrap.sh \
         bundles/locks/cpu.txt bundles/locks/ansible.txt | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    say "venv $VENV is up to date"
    return 0
  fi
  say "installing the cpu serving stack (bundles/locks/cpu.txt: sglang, torch, ...) into $VENV"
  pip_quietly install --upgrade pip
  # The same hash-locked set the cpu image installs: tests serve with exactly what ships.
  # --no-compile, then one compileall over every core: pip compiles each wheel's bytecode in
  # one process, about twice as long on two cores (the image's deps step does the same).
  pip_quietly install --no-compile --no-deps --require-hashes -r bundles/locks/cpu.txt
  say "installing sglx, sglx-platform, sglx-runtime and sglx-kernels (editable, with dev dependencies) into $VENV"
  pip_quietly install --no-compile -e '.[dev]' -e './plugin[dev]' -e './runtime[dev]' -e './kernels[dev]'
  # The control node's wheels are kept as files: a bundle made with --control-wheels carries
  # them, as the tests' control node from a bundle does (tests/integration/test_control_node.py).
  say "fetching the control node's wheels (bundles/locks/ansible.txt, hash-pinned) into $VENV/control-wheels"
  pip_quietly download --no-deps --require-hashes -r bundles/locks/ansible.txt -d "$VENV/control-wheels"
  say "installing ansible-core, ansible-lint and the host checks' pytest from them into $VENV"
  pip_quietly install --no-compile --no-deps --no-index --require-hashes \
    -r bundles/locks/ansible.txt --find-links "$VENV/control-wheels"
  say "compiling the venv's bytecode"
  # Some packages ship test data that is not Python 3 (pip skips those files too).
  "$VENV/bin/python" -m compileall -q -j 0 "$VENV/lib" >/dev/null 2>&1 || true
  echo "$want" >"$stamp"
}

ensure_apt_packages
ensure_sid_packages
ensure_engine
ensure_venv
say "ready: $VENV/bin/sglx --help"
