#!/usr/bin/env bash
# `cmake --install` puts gpuslice on PATH with everything it needs, so a new
# user's first command is found. Installs the build into a
# temporary prefix, then runs a job with the installed daemon and CLI only:
# the daemon finds the shim and the simulated driver beside itself.
#   install_check.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d /tmp/gpuslice-install-XXXXXX)
daemon=
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$prefix"
}
trap cleanup EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/gpuslice bin/gpusliced bin/gpuslice-smi bin/gpuslice-demo-worker lib/libgpuslice.so \
         lib/sim/libcuda.so.1 lib/sim/libnvidia-ml.so.1; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
[ ! -e "$prefix/lib/sim/libcuda.so" ] || { echo "lib/sim/libcuda.so: a link name nothing needs"; exit 1; }
export PATH="$prefix/bin:$PATH"
[ "$(command -v gpuslice)" = "$prefix/bin/gpuslice" ] || { echo "gpuslice is not on PATH"; exit 1; }
gpuslice --version
chmod 755 "$prefix"
export GPUSLICE_SIM_STATE="$prefix/sim-state" GPUSLICE_SIM_GPUS=1xH100-80GB
export GPUSLICE_SOCKET="$prefix/gpuslice.sock"
gpusliced --state-dir "$prefix/state" --socket "$GPUSLICE_SOCKET" --gpu-source simulated \
  --set cgroups=false --set cdi_dir="$prefix/cdi" --log-level warn 2>"$prefix/daemon.log" &
daemon=$!
for _ in $(seq 200); do gpuslice status >/dev/null 2>&1 && break; sleep 0.1; done
out=$(gpuslice run --mem 2GiB -- gpuslice-demo-worker --mem 1GiB --seconds 1 2>&1) || {
  echo "the installed daemon could not run a job:"; echo "$out"; cat "$prefix/daemon.log"; exit 1; }
echo "$out" | tail -2
echo "installed into a prefix; a job ran with the installed programs"
