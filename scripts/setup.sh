#!/usr/bin/env bash
# Installs what gpuslice needs to build and test, from Debian 12 packages only.
# Idempotent: packages already present are not reinstalled, and nothing is
# fetched when everything is there. Must run as root when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libboost1.74-dev libcli11-dev
  libsqlite3-dev sqlite3
  gnuplot-nox
  # Monitoring tests: a real Prometheus (promtool too) and Alertmanager, the
  # status page in headless Chromium; python3 for small test helpers.
  prometheus prometheus-alertmanager chromium python3
  # The old-glibc test: a Debian 11 root file system (glibc 2.31); the
  # container tests: podman with runc (crun fails on hybrid cgroups).
  debootstrap podman runc
  # The docker-compose tests: the real docker-compose (1.29 validates and
  # merges compose files without a Docker engine), PyYAML to read its
  # output, shellcheck for deploy/containers/compose-up.sh.
  docker-compose python3-yaml shellcheck
  # Kubernetes: the device plugin speaks gRPC (Debian's gRPC and
  # protobuf, code generated at build time); the extender and the plugin talk
  # HTTPS to the API server (OpenSSL).
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libssl-dev
  # Slurm: the SPANK plugin builds against libslurm-dev; the tests
  # run a real two-node Slurm (slurmctld, slurmd, munge) in network
  # namespaces (iproute2).
  libslurm-dev slurmctld slurmd slurm-client munge iproute2
  # Kubernetes on a real cluster: Go 1.19 builds Kubernetes 1.20
  # from Debian's source package (scripts/test-kubernetes.sh); etcd,
  # containerd (with runc above), the CNI plugins, iptables for them, openssl
  # for the cluster's certificates.
  golang-1.19-go etcd-server containerd containernetworking-plugins iptables openssl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA driver API header (cuda.h) and link stub. We compile against the
# real header but never need a GPU or NVIDIA's driver: our simulated driver
# stands in for it. The CUDA toolkit in /usr/local/cuda (or $CUDA_HOME) is
# preferred. Without it, we take cuda.h and the stub out of Debian's
# nvidia-cuda-dev package (non-free component) into .deps/cuda/, using a
# private apt source list so the system's sources are left untouched, and
# without installing the package (which would pull in NVIDIA's driver).
root=$(cd "$(dirname "$0")/.." && pwd)
have_cuda_h() {
  for d in "${CUDA_HOME:-/nonexistent}/include" /usr/local/cuda/include /usr/include "$root/.deps/cuda/include"; do
    [ -f "$d/cuda.h" ] && return 0
  done
  return 1
}
if ! have_cuda_h; then
  echo "setup: no cuda.h found; extracting it from Debian's nvidia-cuda-dev into .deps/cuda"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/lists/partial"
  echo "deb http://deb.debian.org/debian bookworm main contrib non-free" >"$tmp/sources.list"
  apt_opts=(-o Dir::Etc::sourcelist="$tmp/sources.list" -o Dir::Etc::sourceparts=-
            -o Dir::State::Lists="$tmp/lists")
  as_root apt-get "${apt_opts[@]}" update -qq
  (cd "$tmp" && as_root apt-get "${apt_opts[@]}" download nvidia-cuda-dev)
  as_root dpkg-deb --fsys-tarfile "$tmp"/nvidia-cuda-dev_*.deb |
    tar -x -C "$tmp" ./usr/include/cuda.h ./usr/include/cudaTypedefs.h \
      ./usr/lib/x86_64-linux-gnu/stubs/libcuda.so
  mkdir -p "$root/.deps/cuda/include" "$root/.deps/cuda/lib64/stubs"
  cp "$tmp/usr/include/cuda.h" "$tmp/usr/include/cudaTypedefs.h" "$root/.deps/cuda/include/"
  cp "$tmp/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$root/.deps/cuda/lib64/stubs/"
  have_cuda_h || { echo "setup: cuda.h still missing; install the CUDA toolkit headers" >&2; exit 1; }
fi
