#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test.
# This is the README's second command, and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/test-rootfs.sh
# A failed Kubernetes build (the archive unreachable...) fails only the
# real-cluster tests, with its reason (scripts/test-kubernetes.sh).
bash scripts/test-kubernetes.sh || true
bash scripts/build.sh
# The multi-user tests (tests/security, the shim's and the compute e2e tests)
# run programs and libraries of build/ as unprivileged test users, as a root
# daemon runs its jobs: they must be able to reach the checkout. A clone in a
# `mktemp -d` folder (0700) is not; give its folders others' search bit (x
# only: nobody gains the right to list or read a folder).
if [ "$(id -u)" -eq 0 ]; then
  d=$(pwd -P)
  while [ "$d" != / ]; do
    [ $(( 0$(stat -c %a "$d") & 01 )) -ne 0 ] || chmod o+x "$d"
    d=$(dirname "$d")
  done
fi
# Tests that start real processes use their own temp dirs and simulated-GPU
# state files, so they can run in parallel.
ctest --test-dir build -j "$(nproc)" --output-on-failure --timeout 300 "$@"
