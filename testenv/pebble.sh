#!/usr/bin/env bash
# Pebble, Let's Encrypt's ACME test server (github.com/letsencrypt/pebble/v2), and pebble-challtestsrv
# (its DNS: every name answers with the address a test chooses), built from the Go module in
# testenv/pebble (its go.mod pins v2.10.3) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/pebble-<version>/{pebble,pebble-challtestsrv}
#
# tests/acme_support.py runs both against twingress's ACME issuer (tests/proxy/test_acme.py).
# Cached and idempotent as testenv/gobuild.sh says. The last line of output is always the
# directory of the binaries.
#
#   testenv/pebble.sh               build if needed, print the directory
#   testenv/pebble.sh --print-path  print the directory, build nothing (the tests run offline)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=pebble module="$here/pebble"
. "$here/gobuild.sh"

version=$(go_required_version github.com/letsencrypt/pebble/v2)
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/pebble-$version

case "${1:-}" in
    --print-path) echo "$key_dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
build() {
    local command
    for command in pebble pebble-challtestsrv; do
        nice -n 15 "$GO" build -trimpath "-ldflags=-s -w" -o "$1/$command" "github.com/letsencrypt/pebble/v2/cmd/$command"
    done
}
go_cached_build "$key_dir" "$key_dir" build pebble pebble-challtestsrv
echo "$key_dir"
