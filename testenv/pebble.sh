#!/usr/bin/env bash
# Pebble, Let's Encrypt's ACME test server (github.com/letsencrypt/pebble/v2), and pebble-challtestsrv
# (its DNS: every name answers with the address a test chooses), built from the Go module in
# testenv/pebble (its go.mod pins v2.10.3) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/pebble-<version>/{pebble,pebble-challtestsrv}
#
# tests/acme_support.py runs both against twingress's ACME issuer (tests/proxy/test_acme.py).
# Idempotent, like h2spec.sh: nothing is built (and no Go is needed) when the binaries match
# go.mod, go.sum and this script. The last line of output is always the directory of the binaries.
#
#   testenv/pebble.sh               build if needed, print the directory
#   testenv/pebble.sh --print-path  print the directory, build nothing (the tests run offline)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/pebble"
die() { echo "testenv/pebble.sh: error: $*" >&2; exit 1; }

version=$(awk '$1 == "github.com/letsencrypt/pebble/v2" { print $2; exit }' "$module/go.mod")
[ -n "$version" ] || die "no github.com/letsencrypt/pebble/v2 requirement in $module/go.mod"
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/pebble-$version
commands=(pebble pebble-challtestsrv)

case "${1:-}" in
    --print-path) echo "$key_dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
up_to_date() {
    local name
    for name in "${commands[@]}"; do [ -x "$key_dir/$name" ] || return 1; done
    [ -f "$key_dir/stamp" ] && [ "$(cat "$key_dir/stamp")" = "$(stamp_value)" ]
}
if up_to_date; then
    echo "$key_dir"
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found (set GO=/path/to/go): Pebble is built from github.com/letsencrypt/pebble/v2"

mkdir -p "$key_dir"
exec 9>"$key_dir/.lock"
flock 9
if up_to_date; then
    echo "$key_dir"
    exit 0
fi
export CGO_ENABLED=0 GO111MODULE=on GOFLAGS=-mod=readonly
start=$(date +%s)
echo "testenv: building pebble $version ..." >&2
for name in "${commands[@]}"; do
    (
        cd "$module"
        nice -n 15 "$GO" build -trimpath "-ldflags=-s -w" -o "$key_dir/$name.tmp" "github.com/letsencrypt/pebble/v2/cmd/$name"
    ) || die "building $name failed (see the go output above)"
    mv -f "$key_dir/$name.tmp" "$key_dir/$name"
done
stamp_value >"$key_dir/stamp"
echo "testenv: built pebble $version in $(( $(date +%s) - start ))s: $key_dir" >&2
echo "$key_dir"
