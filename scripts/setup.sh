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

# The CUDA driver API header (cuda.h). We compile against the real header but
# never need a GPU or NVIDIA's driver: our simulated driver stands in for it.
# The NVIDIA CUDA toolkit in /usr/local/cuda is preferred; without it, Debian's
# nvidia-cuda-dev (from the non-free component) provides the header.
have_cuda_h() {
  for d in "${CUDA_HOME:-/nonexistent}/include" /usr/local/cuda/include /usr/include; do
    [ -f "$d/cuda.h" ] && return 0
  done
  return 1
}
if ! have_cuda_h; then
  echo "setup: no cuda.h found; installing Debian's nvidia-cuda-dev (non-free)"
  src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ] && ! grep -q "non-free" "$src"; then
    as_root sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$src"
  fi
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends nvidia-cuda-dev
  have_cuda_h || { echo "setup: cuda.h still missing; install the CUDA toolkit headers" >&2; exit 1; }
fi
