#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test.
# This is the README's second command, and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Tests that start real processes use their own temp dirs and simulated-GPU
# state files, so they can run in parallel.
ctest --test-dir build -j "$(nproc)" --output-on-failure --timeout 300 "$@"
