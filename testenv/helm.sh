#!/usr/bin/env bash
# Helm 4 (helm.sh/helm/v4), the installer every peer ships a chart for, built from the Go module in
# testenv/helm (its go.mod pins the version; no binary is downloaded) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/helm-<version>/helm
#
# The chart tests (tests/chart/) run it against charts/twingress: lint, template, and install into
# the test apiserver. Cached and idempotent as testenv/gobuild.sh says. The last line of output is
# always the binary's directory.
#
#   testenv/helm.sh               build if needed, print the directory
#   testenv/helm.sh --print-path  print the directory, build nothing (the tests run offline)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=helm module="$here/helm"
. "$here/gobuild.sh"

version=$(go_required_version helm.sh/helm/v4)
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/helm-$version

case "${1:-}" in
    --print-path) echo "$key_dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
# -X sets the version helm prints (its Makefile does the same), so `helm version` names v4.x, not v4.0.
build() {
    nice -n 15 "$GO" build -trimpath "-ldflags=-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
        -o "$1/helm" helm.sh/helm/v4/cmd/helm
}
go_cached_build "$key_dir" "$key_dir" build helm
echo "$key_dir"
