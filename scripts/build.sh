#!/usr/bin/env bash
# Configures and builds gpuslice into build/ (the stable output paths:
# build/bin, build/lib/libgpuslice.so, build/lib/sim/libcuda.so.1, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GPUSLICE_BUILD_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && [ ! -f build/Makefile ] && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build build -j "$jobs"
