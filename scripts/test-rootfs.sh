#!/usr/bin/env bash
# What the tests need beyond packages (scripts/test.sh runs it): a Debian 11
# "bullseye" root file system (glibc 2.31) from Debian's own archive, for
# the old-glibc test and the container tests' image
# (tests/shim/old_glibc_e2e_test.cc, tests/e2e/cdi_podman_e2e_test.cc): the
# shim, the simulated GPU and the demo worker must run in images older than
# this machine. Built once into /var/cache/gpuslice, as root only
# (debootstrap and chroot need it; without root those tests skip).
set -euo pipefail
old_root=/var/cache/gpuslice/bullseye-rootfs
if [ "$(id -u)" -eq 0 ] && [ ! -x "$old_root/bin/sh" ]; then
  echo "test-rootfs: building a Debian 11 root file system in $old_root (debootstrap, minbase)"
  rm -rf "$old_root.tmp"
  mkdir -p "$(dirname "$old_root")"
  if debootstrap --variant=minbase bullseye "$old_root.tmp" http://deb.debian.org/debian \
      >/tmp/gpuslice-debootstrap.log 2>&1; then
    mv "$old_root.tmp" "$old_root"
  else
    echo "test-rootfs: debootstrap failed (see /tmp/gpuslice-debootstrap.log); the old-glibc" \
      "and container tests will fail" >&2
  fi
fi
