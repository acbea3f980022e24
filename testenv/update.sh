#!/usr/bin/env bash
# Regenerate the Go modules that testenv/build.sh builds from:
#
#   testenv/kube/go.mod, go.sum  requires k8s.io/kubernetes vX.Y.Z; every staging module
#                                (k8s.io/api, k8s.io/apiserver, ...) is replaced by its
#                                published v0.Y.Z. The replace lines are generated from
#                                kubernetes' own go.mod, whose staging modules point at
#                                ./staging/src/k8s.io/...; never edit them by hand.
#   testenv/etcd/go.mod, go.sum  requires go.etcd.io/etcd/server/v3 at the version that
#                                kubernetes' go.mod uses.
#
# Usage: testenv/update.sh [vX.Y.Z]
#   Without an argument: the newest non-prerelease v1.x that `go list -m -versions
#   k8s.io/kubernetes` reports. Commit the result; build.sh only reads it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "testenv/update.sh: $*" >&2; exit 1; }

GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
[ -n "$GO" ] && [ -x "$GO" ] || die "Go toolchain not found: install Go (>= 1.26) or set GO=/path/to/go"

# Work outside any module so that `go list -m` queries the proxy.
export GOFLAGS=-mod=mod GO111MODULE=on
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

k8s=${1:-}
if [ -z "$k8s" ]; then
    k8s=$(cd "$scratch" && "$GO" list -m -versions k8s.io/kubernetes | tr ' ' '\n' \
        | grep -E '^v1\.[0-9]+\.[0-9]+$' | sort -V | tail -n 1)
    [ -n "$k8s" ] || die "could not list k8s.io/kubernetes versions"
fi
[[ "$k8s" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "not a kubernetes release version: $k8s"
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
echo "kubernetes $k8s, staging modules $staging" >&2

kmod=$(cd "$scratch" && "$GO" mod download -json "k8s.io/kubernetes@$k8s" | jq -r '.GoMod // empty')
[ -n "$kmod" ] && [ -f "$kmod" ] || die "could not download k8s.io/kubernetes@$k8s"
kjson=$("$GO" mod edit -json "$kmod")

go_version=$(jq -r '.Go' <<<"$kjson")
etcd=$(jq -r '.Require[] | select(.Path == "go.etcd.io/etcd/server/v3") | .Version' <<<"$kjson")
[ -n "$etcd" ] || die "kubernetes $k8s go.mod does not name go.etcd.io/etcd/server/v3"
echo "etcd $etcd (from kubernetes' go.mod), go $go_version" >&2

# --- kube: kube-apiserver and kube-controller-manager -----------------------------------
kdir="$here/kube"
mkdir -p "$kdir"
rm -f "$kdir/go.mod" "$kdir/go.sum"
(
    cd "$kdir"
    "$GO" mod init twingress.local/testenv/kube >/dev/null 2>&1
    "$GO" mod edit -go="$go_version"
    # kubernetes' godebug settings only apply when it is the main module: carry them over.
    jq -r '.GoDebug[]? | "-godebug=\(.Key)=\(.Value)"' <<<"$kjson" | while read -r flag; do
        "$GO" mod edit "$flag"
    done
    "$GO" mod edit -require="k8s.io/kubernetes@$k8s"
    # Every module that kubernetes takes from ./staging gets its published version.
    jq -r '.Replace[] | select(.New.Path | startswith("./staging/")) | .Old.Path' <<<"$kjson" \
        | sort | while read -r m; do
            "$GO" mod edit -replace="$m=$m@$staging"
        done
    "$GO" mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver \
                   -tool=k8s.io/kubernetes/cmd/kube-controller-manager \
                   -tool=k8s.io/kubernetes/cmd/kube-scheduler \
                   -tool=k8s.io/kubernetes/cmd/kubelet \
                   -tool=k8s.io/kubernetes/cmd/kube-proxy \
                   -tool=k8s.io/kubernetes/cmd/kubectl
    "$GO" mod tidy
)

# --- etcd ----------------------------------------------------------------------------------
edir="$here/etcd"
mkdir -p "$edir"
rm -f "$edir/go.mod" "$edir/go.sum"
(
    cd "$edir"
    "$GO" mod init twingress.local/testenv/etcd >/dev/null 2>&1
    "$GO" mod edit -go="$go_version" -require="go.etcd.io/etcd/server/v3@$etcd"
    "$GO" mod tidy
)

echo "updated testenv/kube and testenv/etcd: kubernetes $k8s, etcd $etcd" >&2
