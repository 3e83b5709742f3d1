#!/usr/bin/env bash
# The demo: two CUDA programs share one GPU — a real one when present, else the
# simulated GPU — and gpuslice-smi shows what NVML sees while they run:
# memory per process (including each context's own memory) and utilisation.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
sim=build/lib/sim

if [ -z "${GPUSLICE_DEMO_REAL_GPU:-}" ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "== No NVIDIA GPU here: using gpuslice's simulated GPU (${GPUSLICE_SIM_GPUS:-default: one 80 GiB H100})"
  export LD_LIBRARY_PATH="$PWD/$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  state_dir=$(mktemp -d)
  trap 'rm -rf "$state_dir"' EXIT
  export GPUSLICE_SIM_STATE="$state_dir/sim-state"
else
  echo "== Using the NVIDIA GPU(s) of this machine"
fi

echo "== Two CUDA programs start at once: A holds 6 GiB and keeps the GPU busy 40% of the time, B 10 GiB at 90%"
"$bin/gpuslice-demo-worker" --name A --mem 6GiB --duty 40% --seconds 4 &
a=$!
"$bin/gpuslice-demo-worker" --name B --mem 10GiB --duty 90% --seconds 4 &
b=$!
sleep 2
echo
echo "== What NVML sees while both run (gpuslice-smi):"
"$bin/gpuslice-smi"
echo
wait "$a" "$b"
echo
echo "== After both exit, their memory is back:"
"$bin/gpuslice-smi"
