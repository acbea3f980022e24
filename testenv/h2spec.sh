#!/usr/bin/env bash
# h2spec, the HTTP/2 conformance suite (github.com/summerwind/h2spec), built from the Go module in
# testenv/h2spec (its go.mod pins the version, and says why it is v2.2.1) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/h2spec-<version>/h2spec
#
# tests/proxy/test_h2spec.py runs it against twingress's TLS (h2 by ALPN) and h2c listeners.
# Cached and idempotent as testenv/gobuild.sh says. The last line of output is always the binary's path.
#
#   testenv/h2spec.sh               build if needed, print the path
#   testenv/h2spec.sh --print-path  print the path, build nothing (the tests run offline)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=h2spec module="$here/h2spec"
. "$here/gobuild.sh"

version=$(go_required_version github.com/summerwind/h2spec)
plain=${version%+incompatible}  # v2.2.1+incompatible: a v2 tag of a module without a go.mod
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/h2spec-$plain

case "${1:-}" in
    --print-path) echo "$key_dir/h2spec"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
# main.VERSION and main.COMMIT are what h2spec's own Makefile sets (h2spec --version prints them).
build() {
    nice -n 15 "$GO" build -trimpath "-ldflags=-s -w -X main.VERSION=${plain#v} -X main.COMMIT=$version" \
        -o "$1/h2spec" github.com/summerwind/h2spec/cmd/h2spec
}
go_cached_build "$key_dir" "$key_dir" build h2spec
echo "$key_dir/h2spec"
