#!/usr/bin/env bash
# Suspend and resume of a job under the daemon, as a user does it: a
# throw-away gpusliced on the simulated GPU runs gpuslice-demo-worker holding
# SIZE of pattern-filled device memory (--verify); `gpuslice suspend` and
# `gpuslice resume` (each waits for the outcome) are timed REPS times; the
# worker then checks every byte (0 must differ). Prints each round and the
# medians (figures in docs/PERFORMANCE.md, "Suspend and resume").
#
#   bench/checkpoint/daemon_suspend_bench.sh [SIZE] [REPS]     (default 2GiB 5)
#
# GPUSLICE_BUILD_DIR: the build to run (default: build/ in this repository).
# GPUSLICE_SIM_CHECKPOINT_TRANSFER is passed on to the job (docs/SIMULATOR.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${1:-2GiB}
reps=${2:-5}
build=${GPUSLICE_BUILD_DIR:-$PWD/build}
bin=$build/bin

tmp=$(mktemp -d)
chmod 755 "$tmp"
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

export GPUSLICE_SIM_STATE="$tmp/sim-state" GPUSLICE_SIM_GPUS=1xH100-80GB
export GPUSLICE_SOCKET="$tmp/gpuslice.sock"
"$bin/gpusliced" --state-dir "$tmp/state" --socket "$GPUSLICE_SOCKET" --gpu-source simulated \
  --set cdi_dir="$tmp/cdi" --log-level warn >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
gs() { "$bin/gpuslice" "$@"; }
for _ in $(seq 100); do gs status >/dev/null 2>&1 && break; sleep 0.1; done
gs status >/dev/null || { cat "$tmp/daemon.log"; exit 1; }

# Long enough for every round even at several seconds each; it ends on its
# own after the last resume and checks its memory.
seconds=$((20 + reps * 12))
id=$(gs submit --name held --mem 40GiB --compute 50% -- "$bin/gpuslice-demo-worker" --name held \
  --mem "$size" --verify --duty 50% --kernel-us 1000 --seconds "$seconds")
used() { gs ps --all --json | python3 -c "
import json, sys
for j in json.load(sys.stdin)['jobs']:
    if str(j['id']) == '$id':
        print(j.get('usage', {}).get('memory_used_bytes', 0))"; }
bytes=$(python3 -c "
import re; m = re.fullmatch(r'(\d+)([KMG])iB', '$size'); print(int(m.group(1)) << {'K': 10, 'M': 20, 'G': 30}[m.group(2)])")
for _ in $(seq 600); do [ "$(used)" -ge "$bytes" ] 2>/dev/null && break; sleep 0.1; done
[ "$(used)" -ge "$bytes" ] || { echo "the job never held $size" >&2; exit 1; }

ms() { echo $(( $(date +%s%N) / 1000000 )); }
suspends=() resumes=()
for r in $(seq "$reps"); do
  sleep 1  # Let it launch between rounds, as a job does.
  t0=$(ms); gs suspend "$id" >/dev/null; t1=$(ms)
  gs resume "$id" >/dev/null; t2=$(ms)
  suspends+=($((t1 - t0))) resumes+=($((t2 - t1)))
  echo "round $r: suspend $((t1 - t0)) ms, resume $((t2 - t1)) ms"
done
for _ in $(seq $((seconds * 10 + 600))); do
  gs ps --json | grep -q '"state"' || break
  sleep 0.1
done
log=$(gs logs "$id" 2>&1)
echo "$log" | grep "verified" || { echo "$log" >&2; exit 1; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "size $size, $reps rounds: suspend median $(median "${suspends[@]}") ms, resume median $(median "${resumes[@]}") ms"
echo "$log" | grep -q ": 0 bytes differ"
