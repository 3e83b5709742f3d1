#!/usr/bin/env bash
# The demo: gpusliced hands out one GPU — a real one when present, else the
# simulated GPU — to several jobs at once. Each job runs inside a slice whose
# memory limit the shim enforces; a job that does not fit waits in the queue
# and starts when memory frees; a job that tries to take more than it asked
# for gets CUDA_ERROR_OUT_OF_MEMORY. Each job asks the GPU for a part of its
# time (its demand); one of them is guaranteed a share. Two tables end it:
# what happened to the jobs, and what each job asked for and got, as measured
# in this run (the jobs' own reports and NVML's per-process figures).
#
# GPUSLICE_BUILD_DIR: the build to run (default: build/ in this repository).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${GPUSLICE_BUILD_DIR:-$root/build}
bin=$build/bin

tmp=$(mktemp -d)
chmod 755 "$tmp"
daemon_pid=
sampler_pid=
cleanup() {
  [ -n "$sampler_pid" ] && touch "$tmp/stop" && wait "$sampler_pid" 2>/dev/null
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${GPUSLICE_DEMO_REAL_GPU:-}" ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "== No NVIDIA GPU here: gpuslice runs on its simulated GPU (${GPUSLICE_SIM_GPUS:-one 80 GiB H100})"
  export GPUSLICE_SIM_STATE="$tmp/sim-state"
  source=simulated
else
  echo "== Using the NVIDIA GPU(s) of this machine"
  source=auto
fi

export GPUSLICE_SOCKET="$tmp/gpuslice.sock"
"$bin/gpusliced" --state-dir "$tmp/state" --socket "$GPUSLICE_SOCKET" --gpu-source "$source" \
  --set cdi_dir="$tmp/cdi" --log-level warn >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do "$bin/gpuslice" status >/dev/null 2>&1 && break; sleep 0.1; done
"$bin/gpuslice" status >/dev/null || { cat "$tmp/daemon.log"; exit 1; }

gs() { "$bin/gpuslice" "$@"; }
worker=$bin/gpuslice-demo-worker

echo
echo "== The GPU before any job (gpuslice gpus):"
gs gpus
echo
echo "== Four jobs arrive at once. Each sends the GPU requests of 2 ms of work on a fixed"
echo "   schedule; its demand is the part of the GPU's time they add up to:"
echo "   train-a   30 GiB, 30% share    uses 20 GiB, demand 30% (a request every 6.7 ms)"
echo "   train-b   30 GiB, no share     uses 25 GiB, demand 80%"
echo "   notebook  30 GiB, no share     demand 50%; does not fit beside them: waits until memory frees"
echo "   greedy     8 GiB               tries to take 12 GiB: the shim refuses (CUDA out of memory)"
# NVML's per-process figures while the jobs run (each slice's GPU use, as
# gpuslice top shows it), one snapshot a line, twice a second, until told to
# stop.
(
  while [ ! -e "$tmp/stop" ]; do
    gs top --json 2>/dev/null | tr -d '\n' && echo
    sleep 0.5
  done
) >"$tmp/top.jsonl" &
sampler_pid=$!
gs submit --name train-a --mem 30GiB --compute 30% -- "$worker" --name train-a --mem 20GiB --duty 30% --seconds 4 >/dev/null
gs submit --name train-b --mem 30GiB -- "$worker" --name train-b --mem 25GiB --duty 80% --seconds 4 >/dev/null
gs submit --name notebook --mem 30GiB -- "$worker" --name notebook --mem 10GiB --duty 50% --seconds 2 >/dev/null
gs submit --name greedy --mem 8GiB -- "$worker" --name greedy --mem 12GiB --seconds 1 >/dev/null
sleep 1.5
echo
echo "== While they run (gpuslice ps):"
gs ps
echo
echo "== The slices on the GPU (gpuslice gpus):"
gs gpus
if [ "$source" = simulated ]; then
  echo
  echo "== What NVML sees (gpuslice-smi; each process also holds its context's own memory):"
  LD_LIBRARY_PATH="$build/lib/sim" "$bin/gpuslice-smi"
fi

# Wait until every job has ended.
for _ in $(seq 300); do
  [ "$(gs ps --json | grep -c '"state"')" = 0 ] && break
  sleep 0.2
done
touch "$tmp/stop"
wait "$sampler_pid" || true
sampler_pid=
echo
echo "== What happened (gpuslice ps --all):"
gs ps --all
echo
echo "== Output of each job (gpuslice logs):"
gs ps --all --json >"$tmp/jobs.json"
for id in $(grep -o '"id": *[0-9]*' "$tmp/jobs.json" | grep -o '[0-9]*$' | sort -n); do
  gs logs "$id" >"$tmp/log-$id" 2>&1 || true
  sed 's/^/   /' "$tmp/log-$id"
done
echo
echo "== Compute: what each job was guaranteed, asked for and got (measured in this run):"
python3 "$root/scripts/demo_summary.py" "$tmp"
