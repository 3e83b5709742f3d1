#!/usr/bin/env bash
# What the real-cluster Kubernetes tests need beyond packages (scripts/test.sh
# runs it): Kubernetes 1.20.2's kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl, built from Debian 12's source package
# `kubernetes` (the whole tree, vendor/ included) with Debian's Go 1.19.
# Nothing is downloaded but that source package, from Debian's archive,
# through a private apt source list (the system's sources are left
# untouched); the Go build runs with GOPROXY=off and -mod=vendor.
#
# Built once into /var/cache/gpuslice/kubernetes-1.20.2/bin (about 12 min on
# two cores), as root only (the tests that use it need root; without root
# they skip). Usage: scripts/test-kubernetes.sh [--force]
set -euo pipefail

version=1.20.2
cache=/var/cache/gpuslice/kubernetes-$version
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
go=/usr/lib/go-1.19/bin/go

have_all() {
  for b in "${bins[@]}"; do [ -x "$cache/bin/$b" ] || return 1; done
}

if [ "$(id -u)" -ne 0 ]; then
  exit 0  # The Kubernetes tests skip without root.
fi
if [ "${1:-}" != --force ] && have_all; then
  exit 0
fi

echo "test-kubernetes: building Kubernetes $version from Debian's source package into $cache" \
  "(once; about 12 min on two cores; log: /tmp/gpuslice-kubernetes-build.log)"
tmp=$(mktemp -d /var/tmp/gpuslice-kubernetes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
exec 3>&1 >/tmp/gpuslice-kubernetes-build.log 2>&1
# A failed build is recorded beside the cache: the cluster tests then fail
# with its reason rather than skip as if nothing had been tried.
rm -f "$cache.failed"
fail() {
  echo "test-kubernetes: $* (see /tmp/gpuslice-kubernetes-build.log)" >&3
  mkdir -p "$(dirname "$cache")"
  echo "$* (log: /tmp/gpuslice-kubernetes-build.log)" >"$cache.failed"
  exit 1
}
# Any other step that fails (a source edit below no longer applying...) is
# recorded too.
trap 'fail "the step at line $LINENO of scripts/test-kubernetes.sh failed"' ERR

[ -x "$go" ] || fail "$go is missing (Debian package golang-1.19-go; scripts/setup.sh installs it)"

# The source package, through a private source list with a deb-src line.
mkdir -p "$tmp/apt/lists/partial"
echo "deb-src http://deb.debian.org/debian bookworm main" >"$tmp/apt/sources.list"
# An unreachable archive fails within minutes rather than hanging CI.
apt_opts=(-o Dir::Etc::sourcelist="$tmp/apt/sources.list" -o Dir::Etc::sourceparts=-
          -o Dir::State::Lists="$tmp/apt/lists" -o Acquire::http::Timeout=60 -o Acquire::Retries=2)
apt-get "${apt_opts[@]}" update -qq || fail "apt-get update (deb-src) failed"
(cd "$tmp/apt" && apt-get "${apt_opts[@]}" source --download-only "kubernetes=1.20.5+really$version-1.1+deb12u1") ||
  (cd "$tmp/apt" && apt-get "${apt_opts[@]}" source --download-only kubernetes) ||
  fail "apt-get source kubernetes failed"
dpkg-source -x "$tmp"/apt/kubernetes_*.dsc "$tmp/src" || fail "dpkg-source -x failed"
src=$tmp/src
grep -q "^# k8s.io/api " "$src/vendor/modules.txt" || fail "the source package has no vendor/"

# Go 1.19 reads vendor/modules.txt more strictly than the Go 1.15 that wrote
# it: an unversioned "# M => R" header that follows M's versioned header makes
# it report "updates to go.mod needed". Those lines only restate the
# replacement; moving them after all the others satisfies the check.
python3 - "$src/vendor/modules.txt" <<'EOF'
import sys
path = sys.argv[1]
lines = open(path).read().splitlines()
versioned, keep, moved = set(), [], []
for line in lines:
    f = line.split()
    if line.startswith("# ") and len(f) >= 3:
        if f[2] == "=>":
            if f[1] in versioned:
                moved.append(line)
                continue
        else:
            versioned.add(f[1])
    keep.append(line)
open(path, "w").write("\n".join(keep + moved) + "\n")
print(f"modules.txt: moved {len(moved)} replacement headers to the end")
EOF

# The vendored github.com/modern-go/reflect2 v1.0.1 iterates maps through
# reflect.mapiterinit with its pre-Go-1.18 signature (the runtime returned
# the iterator; since 1.18 the caller passes one of the runtime's size), so
# with Go 1.19 every map json-iterator encodes with sorted keys faults
# (kube-apiserver died so recording a mutating webhook's patch). Declared
# here as Go 1.19 has it, with an iterator as large as the runtime's hiter.
python3 - "$src/vendor/github.com/modern-go/reflect2" <<'EOF'
import sys
d = sys.argv[1]
def edit(name, old, new):
    path = f"{d}/{name}"
    text = open(path).read()
    if old not in text:
        sys.exit(f"reflect2 {name}: the text to change is not there (another version?)")
    open(path, "w").write(text.replace(old, new, 1))
edit("unsafe_link.go",
     "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter",
     "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)")
edit("unsafe_link.go",
     "\t// rest fields are ignored\n}",
     "\t// The rest of runtime.hiter (Go 1.18 to 1.22), which mapiterinit fills in.\n"
     "\tt, h, buckets, bptr, overflow, oldoverflow unsafe.Pointer\n"
     "\tstartBucket uintptr\n"
     "\toffset, wrapped, b, i uint8\n"
     "\tbucket, checkBucket uintptr\n}")
edit("unsafe_map.go",
     "\treturn &UnsafeMapIterator{\n\t\thiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),",
     "\tit := new(hiter)\n\tmapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), it)\n"
     "\treturn &UnsafeMapIterator{\n\t\thiter:      it,")
print("reflect2: map iteration declared as Go 1.18 and later have it")
EOF

export CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor GOCACHE=$tmp/gocache HOME=$tmp
export GOTOOLCHAIN=local GOTELEMETRY=off

# pkg/generated/openapi/zz_generated.openapi.go is not in the tarball (the
# upstream Makefile generates it): build openapi-gen from the vendored
# kube-openapi and run it, as Makefile.generated_files does, over every
# package tagged +k8s:openapi-gen (in GOPATH mode: gengo names the staging
# packages k8s.io/kubernetes/vendor/...).
cd "$src"
"$go" build -o "$tmp/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen ||
  fail "building openapi-gen failed"
dirs=$(find -H . \( -path ./vendor -o -path './_*' -o -path './.*' \) -prune -o -type f -name '*.go' -print0 |
  xargs -0 grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' | xargs -n1 dirname |
  sed -e 's|^\./||' -e 's|^staging/src/|vendor/|' |
  grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' | LC_ALL=C sort -u)
inputs=$(echo "$dirs" | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
mkdir -p "$tmp/gopath/src/k8s.io"
ln -s "$src" "$tmp/gopath/src/k8s.io/kubernetes"
(cd "$tmp/gopath/src/k8s.io/kubernetes" &&
  GO111MODULE=off GOFLAGS='' GOPATH="$tmp/gopath" GOROOT="$("$go" env GOROOT)" PATH="$(dirname "$go"):$PATH" \
    "$tmp/openapi-gen" --logtostderr -i "$inputs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$tmp/openapi-violations.report") || fail "openapi-gen failed"
[ -s pkg/generated/openapi/zz_generated.openapi.go ] || fail "openapi-gen wrote nothing"

# The version the components report (nodes, kubectl version): set as the
# upstream build does (hack/lib/version.sh), for both package paths.
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  for p in "$pkg" "k8s.io/kubernetes/vendor/$pkg"; do
    ldflags+=" -X $p.gitVersion=v$version -X $p.gitMajor=1 -X $p.gitMinor=20"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
done
mkdir -p "$tmp/out"
for b in "${bins[@]}"; do
  echo "building $b"
  "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/out/$b" "./cmd/$b" || fail "building $b failed"
done
"$tmp/out/kubelet" --version | grep -q "v$version" || fail "kubelet does not report v$version"

rm -rf "$cache.tmp"
mkdir -p "$cache.tmp/bin"
cp "$tmp"/out/* "$cache.tmp/bin/"
echo "Kubernetes $version from Debian's source package $(basename "$tmp"/apt/kubernetes_*.dsc)," \
  "built by scripts/test-kubernetes.sh with $("$go" version)" >"$cache.tmp/BUILT"
rm -rf "$cache"
mv "$cache.tmp" "$cache"
echo "test-kubernetes: built ${bins[*]} into $cache/bin" >&3
