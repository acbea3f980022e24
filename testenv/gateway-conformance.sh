#!/usr/bin/env bash
# The Gateway API conformance suite and what its pods run, built from the Go module in
# testenv/gateway-conformance (it requires sigs.k8s.io/gateway-api/conformance at the version
# the tests pin), into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-conformance-<version>/bin/
#
#   conformance.test  `go test -c sigs.k8s.io/gateway-api/conformance` (TestConformance)
#   echo-basic        the suite's echo server (conformance/echo-basic: HTTP, H2C, TLS, gRPC, TCP, UDP)
#   dnswhoami         a DNS answerer standing in for the suite's CoreDNS pod (dnswhoami/main.go)
#
# tests/kube/test_gateway_conformance.py runs them (the stand-in node runs the pods' processes).
# Cached and idempotent as testenv/gobuild.sh says (the stamp covers the sources too). The last
# line of output is always the bin directory.
#
#   testenv/gateway-conformance.sh                  build if needed, print the bin dir
#   testenv/gateway-conformance.sh --print-bin-dir  print the bin dir, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=gateway-conformance module="$here/gateway-conformance"
. "$here/gobuild.sh"

version=$(go_required_version sigs.k8s.io/gateway-api/conformance)
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-conformance-$version
bin_dir="$key_dir/bin"

case "${1:-}" in
    --print-bin-dir) echo "$bin_dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "$module"/*.go "$module"/dnswhoami/*.go "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
build() {
    local flags=(-trimpath "-ldflags=-s -w")
    nice -n 15 "$GO" test -c "${flags[@]}" -o "$1/conformance.test" sigs.k8s.io/gateway-api/conformance
    nice -n 15 "$GO" build "${flags[@]}" -o "$1/echo-basic" sigs.k8s.io/gateway-api/conformance/echo-basic
    nice -n 15 "$GO" build "${flags[@]}" -o "$1/dnswhoami" ./dnswhoami
}
go_cached_build "$key_dir" "$bin_dir" build conformance.test echo-basic dnswhoami
echo "$bin_dir"
