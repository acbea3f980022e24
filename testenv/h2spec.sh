#!/usr/bin/env bash
# h2spec, the HTTP/2 conformance suite (github.com/summerwind/h2spec), built from the Go module in
# testenv/h2spec (its go.mod pins the version, and says why it is v2.2.1) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/h2spec-<version>/h2spec
#
# tests/proxy/test_h2spec.py runs it against twingress's TLS (h2 by ALPN) and h2c listeners.
# Idempotent, like promql.sh: nothing is built (and no Go is needed) when the binary matches
# go.mod, go.sum and this script. The last line of output is always the binary's path.
#
#   testenv/h2spec.sh               build if needed, print the path
#   testenv/h2spec.sh --print-path  print the path, build nothing (the tests run offline)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/h2spec"
die() { echo "testenv/h2spec.sh: error: $*" >&2; exit 1; }

version=$(awk '$1 == "github.com/summerwind/h2spec" { print $2; exit }' "$module/go.mod")
[ -n "$version" ] || die "no github.com/summerwind/h2spec requirement in $module/go.mod"
plain=${version%+incompatible}  # v2.2.1+incompatible: a v2 tag of a module without a go.mod
key_dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/h2spec-$plain
binary="$key_dir/h2spec"

case "${1:-}" in
    --print-path) echo "$binary"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

stamp_value() { cat "$module/go.mod" "$module/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
up_to_date() { [ -x "$binary" ] && [ -f "$key_dir/stamp" ] && [ "$(cat "$key_dir/stamp")" = "$(stamp_value)" ]; }
if up_to_date; then
    echo "$binary"
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found (set GO=/path/to/go): h2spec is built from github.com/summerwind/h2spec"

mkdir -p "$key_dir"
exec 9>"$key_dir/.lock"
flock 9
if up_to_date; then
    echo "$binary"
    exit 0
fi
export CGO_ENABLED=0 GO111MODULE=on GOFLAGS=-mod=readonly
start=$(date +%s)
echo "testenv: building h2spec $version ..." >&2
# main.VERSION and main.COMMIT are what h2spec's own Makefile sets (h2spec --version prints them).
(
    cd "$module"
    nice -n 15 "$GO" build -trimpath "-ldflags=-s -w -X main.VERSION=${plain#v} -X main.COMMIT=$version" \
        -o "$binary.tmp" github.com/summerwind/h2spec/cmd/h2spec
) || die "building h2spec failed (see the go output above)"
mv -f "$binary.tmp" "$binary"
stamp_value >"$key_dir/stamp"
echo "testenv: built h2spec $version in $(( $(date +%s) - start ))s: $binary" >&2
echo "$binary"
