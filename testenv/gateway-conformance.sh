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
# Idempotent, like build.sh: nothing is built when the binaries match go.mod, go.sum and the
# sources. The last line of output is always the bin directory.
#
#   testenv/gateway-conformance.sh                  build if needed, print the bin dir
#   testenv/gateway-conformance.sh --print-bin-dir  print the bin dir, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/gateway-conformance"
die() { echo "testenv/gateway-conformance.sh: error: $*" >&2; exit 1; }

version=$(awk '{ for (i = 1; i < NF; i++) if ($i == "sigs.k8s.io/gateway-api/conformance") { print $(i + 1); exit } }' "$module/go.mod")
[ -n "$version" ] || die "no sigs.k8s.io/gateway-api/conformance requirement in $module/go.mod"
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-conformance-$version
bin_dir="$key_dir/bin"

case "${1:-}" in
    --print-bin-dir) echo "$bin_dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

binaries=(conformance.test echo-basic dnswhoami)
stamp_value() { cat "$module/go.mod" "$module/go.sum" "$module"/*.go "$module"/dnswhoami/*.go "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
up_to_date() {
    local b
    for b in "${binaries[@]}"; do [ -x "$bin_dir/$b" ] || return 1; done
    [ -f "$key_dir/stamp" ] && [ "$(cat "$key_dir/stamp")" = "$(stamp_value)" ]
}
if up_to_date; then
    echo "$bin_dir"
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found (set GO=/path/to/go): the suite is built from sigs.k8s.io/gateway-api/conformance"

mkdir -p "$key_dir"
exec 9>"$key_dir/.lock"
flock 9
if up_to_date; then
    echo "$bin_dir"
    exit 0
fi
work=$(mktemp -d "$key_dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GO111MODULE=on GOFLAGS=-mod=readonly
start=$(date +%s)
echo "testenv: building the Gateway API conformance suite $version ..." >&2
flags=(-trimpath "-ldflags=-s -w")
(
    cd "$module"
    nice -n 15 "$GO" test -c "${flags[@]}" -o "$work/conformance.test" sigs.k8s.io/gateway-api/conformance
    nice -n 15 "$GO" build "${flags[@]}" -o "$work/echo-basic" sigs.k8s.io/gateway-api/conformance/echo-basic
    nice -n 15 "$GO" build "${flags[@]}" -o "$work/dnswhoami" ./dnswhoami
) || die "building the conformance suite failed (see the go output above)"
mkdir -p "$bin_dir"
for b in "${binaries[@]}"; do mv -f "$work/$b" "$bin_dir/$b"; done
stamp_value >"$key_dir/stamp"
echo "testenv: built the conformance suite $version in $(( $(date +%s) - start ))s into $bin_dir" >&2
echo "$bin_dir"
