#!/usr/bin/env bash
# The proxies users would pick instead of twingress, built from their Go modules for
# python -m bench --against traefik,caddy (bench/lib/peers.py) into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/bench/traefik-<version>/traefik
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/bench/caddy-<version>/caddy
#
# Traefik v3: its own module, downloaded with `go mod download` and built with
# `go build ./cmd/traefik` from a writable copy of the module's directory (so its go.mod,
# go.sum and replace directives are the ones its release used; `go install` refuses a
# module with replace directives). TRAEFIK_VERSION below says why it is v3.6.12, not v3.7.x.
# Caddy 2: bench/caddy, a main module of ours whose go.mod pins github.com/caddyserver/caddy/v2
# and whose go.sum pins its dependencies.
#
# Both are built like their release binaries (CGO off, -trimpath, -s -w). Idempotent, like
# testenv/h2spec.sh: nothing is built (and no Go is needed) when a binary's stamp matches its
# inputs. The last lines of output are always "traefik PATH" and "caddy PATH".
#
#   bench/peers.sh               build what is missing or stale, print the paths
#   bench/peers.sh --print-path  print the paths, build nothing
#
# A build takes minutes and both CPUs: on a machine where benchmarks run, start it when none does.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "bench/peers.sh: error: $*" >&2; exit 1; }

# v3.7.x cannot be built from the module proxy: its go.mod replaces
# github.com/traefik/traefik/dynamic/ext with ./pkg/config/dynamic/ext, a nested module that the
# v3 module's zip leaves out (and that the proxy does not serve), and its lego v5 DNS providers
# need modules the proxy refuses (403). v3.6.12 is the newest v3.6 the proxy serves; every
# dependency of ./cmd/traefik resolves.
TRAEFIK_VERSION=${TRAEFIK_VERSION:-v3.6.12}
caddy_module="$here/caddy"
CADDY_VERSION=$(awk '$1 == "require" && $2 == "github.com/caddyserver/caddy/v2" { print $3; exit }' "$caddy_module/go.mod")
[ -n "$CADDY_VERSION" ] || die "no github.com/caddyserver/caddy/v2 requirement in $caddy_module/go.mod"

cache=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/bench
traefik_dir="$cache/traefik-$TRAEFIK_VERSION"
caddy_dir="$cache/caddy-$CADDY_VERSION"

print_paths() {
    echo "traefik $traefik_dir/traefik"
    echo "caddy $caddy_dir/caddy"
}

case "${1:-}" in
    --print-path) print_paths; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

traefik_stamp() { { echo "$TRAEFIK_VERSION"; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -d' ' -f1; }
caddy_stamp() { cat "$caddy_module/go.mod" "$caddy_module/go.sum" "$caddy_module/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
up_to_date() {  # DIR BINARY STAMP
    [ -x "$1/$2" ] && [ -f "$1/stamp" ] && [ "$(cat "$1/stamp")" = "$3" ]
}
if up_to_date "$traefik_dir" traefik "$(traefik_stamp)" && up_to_date "$caddy_dir" caddy "$(caddy_stamp)"; then
    print_paths
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found (set GO=/path/to/go): Traefik and Caddy are built from their Go modules"

mkdir -p "$cache"
exec 9>"$cache/.peers.lock"
flock 9
export CGO_ENABLED=0 GO111MODULE=on GOFLAGS="-mod=readonly -buildvcs=false"

build_traefik() {
    local src="$traefik_dir/src" start module_dir
    start=$(date +%s)
    echo "bench: building Traefik $TRAEFIK_VERSION ..." >&2
    module_dir=$(cd "$cache" && "$GO" mod download -json "github.com/traefik/traefik/v3@$TRAEFIK_VERSION" \
        | awk -F'"' '$2 == "Dir" { print $4 }')
    [ -n "$module_dir" ] && [ -d "$module_dir" ] || die "go mod download github.com/traefik/traefik/v3@$TRAEFIK_VERSION failed"
    # The module cache is read-only and the build resolves go.mod's relative replace paths
    # from the module's directory: build in a writable copy of it.
    rm -rf "$src"
    mkdir -p "$traefik_dir"
    cp -r "$module_dir" "$src"
    chmod -R u+w "$src"
    # The version variables are the ones Traefik's Makefile sets (traefik version prints them).
    (
        cd "$src"
        nice -n 10 "$GO" build -trimpath -ldflags "-s -w \
            -X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION \
            -X github.com/traefik/traefik/v3/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
            -o "$traefik_dir/traefik.tmp" ./cmd/traefik
    ) || die "building Traefik $TRAEFIK_VERSION failed (see the go output above)"
    mv -f "$traefik_dir/traefik.tmp" "$traefik_dir/traefik"
    rm -rf "$src"
    traefik_stamp >"$traefik_dir/stamp"
    echo "bench: built Traefik $TRAEFIK_VERSION in $(( $(date +%s) - start ))s: $traefik_dir/traefik" >&2
}

build_caddy() {
    local start
    start=$(date +%s)
    echo "bench: building Caddy $CADDY_VERSION (bench/caddy) ..." >&2
    mkdir -p "$caddy_dir"
    (
        cd "$caddy_module"
        nice -n 10 "$GO" build -trimpath -ldflags "-s -w" -o "$caddy_dir/caddy.tmp" .
    ) || die "building Caddy $CADDY_VERSION failed (see the go output above)"
    mv -f "$caddy_dir/caddy.tmp" "$caddy_dir/caddy"
    caddy_stamp >"$caddy_dir/stamp"
    echo "bench: built Caddy $CADDY_VERSION in $(( $(date +%s) - start ))s: $caddy_dir/caddy" >&2
}

up_to_date "$traefik_dir" traefik "$(traefik_stamp)" || build_traefik
up_to_date "$caddy_dir" caddy "$(caddy_stamp)" || build_caddy
print_paths
