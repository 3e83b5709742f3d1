#!/usr/bin/env bash
# The README's first command: install what is needed, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec bash scripts/demo.sh
