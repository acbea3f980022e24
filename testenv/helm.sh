#!/usr/bin/env bash
# Helm 4 (helm.sh/helm/v4), the installer every peer ships a chart for, built from the Go module in
# testenv/helm (its go.mod pins the version; no binary is downloaded) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/helm-<version>/helm
#
# The chart tests (tests/chart/) run it against charts/twingress: lint, template, and install into
# the test apiserver. Idempotent, like pebble.sh: nothing is built (and no Go is needed) when the
# binary matches go.mod, go.sum and this script. The last line of output is always the binary's
# directory.
#
#   testenv/helm.sh               build if needed, print the directory
#   testenv/helm.sh --print-path  print the directory, build nothing (the tests run offline)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/helm"
die() { echo "testenv/helm.sh: error: $*" >&2; exit 1; }

version=$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$module/go.mod")
[ -n "$version" ] || die "no helm.sh/helm/v4 requirement in $module/go.mod"
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/helm-$version

case "${1:-}" in
    --print-path) echo "$key_dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
up_to_date() { [ -x "$key_dir/helm" ] && [ -f "$key_dir/stamp" ] && [ "$(cat "$key_dir/stamp")" = "$(stamp_value)" ]; }
if up_to_date; then
    echo "$key_dir"
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found (set GO=/path/to/go): Helm is built from helm.sh/helm/v4"

mkdir -p "$key_dir"
exec 9>"$key_dir/.lock"
flock 9
if up_to_date; then
    echo "$key_dir"
    exit 0
fi
export CGO_ENABLED=0 GO111MODULE=on GOFLAGS=-mod=readonly
start=$(date +%s)
echo "testenv: building helm $version ..." >&2
# -X sets the version helm prints (its Makefile does the same), so `helm version` names v4.x, not v4.0.
(
    cd "$module"
    nice -n 15 "$GO" build -trimpath "-ldflags=-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
        -o "$key_dir/helm.tmp" helm.sh/helm/v4/cmd/helm
) || die "building helm failed (see the go output above)"
mv -f "$key_dir/helm.tmp" "$key_dir/helm"
stamp_value >"$key_dir/stamp"
echo "testenv: built helm $version in $(( $(date +%s) - start ))s: $key_dir" >&2
echo "$key_dir"
