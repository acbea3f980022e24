# Sourced, not run: what testenv's Go tool scripts (h2spec.sh, pebble.sh, helm.sh,
# gateway-conformance.sh) share. Each pins its tool in a Go module of its own (testenv/<tool>/go.mod),
# builds it from source with the module proxy (no binary is downloaded), and caches it under
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/<tool>-<version>/
#
# with a stamp: the hash of what the build reads (go.mod, go.sum, the calling script, and any
# sources the script names), so a current build costs milliseconds and needs no Go. The build runs
# under an flock, so two callers (make testenv and a test run) never build the same tool at once.
#
# A script sets `name` (for messages) and `module` (the Go module directory), then:
#
#   version=$(go_required_version MODULE-PATH)     the version its go.mod requires, or exit 1
#   go_cached_build STAMP-DIR OUT-DIR BUILD-FN BINARY...
#       if OUT-DIR holds every BINARY and STAMP-DIR/stamp matches `stamp_value` (the script defines
#       it), does nothing; else calls `BUILD-FN WORK-DIR` (which writes each BINARY into WORK-DIR),
#       moves them into OUT-DIR and writes the stamp. Messages go to stderr; stdout stays the
#       script's own (its last line is the path the callers read).

die() { echo "testenv/$name.sh: error: $*" >&2; exit 1; }

# The version go.mod requires of MODULE-PATH, from `require X v` and from a require block's `X v`.
go_required_version() {
    local found
    found=$(awk -v path="$1" '{ for (i = 1; i < NF; i++) if ($i == path) { print $(i + 1); exit } }' "$module/go.mod")
    [ -n "$found" ] || die "no $1 requirement in $module/go.mod"
    echo "$found"
}

# The Go toolchain: $GO, else go on PATH, else /usr/local/go/bin/go (where testenv installs it).
go_toolchain() {
    local go=${GO:-$(command -v go || true)}
    if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
    [ -n "$go" ] && [ -x "$go" ] || die "Go not found (set GO=/path/to/go): $name is built from its Go module in $module"
    echo "$go"
}

_go_built() {  # STAMP-DIR OUT-DIR BINARY...: every binary there and the stamp current
    local stamp_dir=$1 out_dir=$2 binary
    shift 2
    for binary in "$@"; do [ -x "$out_dir/$binary" ] || return 1; done
    [ -f "$stamp_dir/stamp" ] && [ "$(cat "$stamp_dir/stamp")" = "$(stamp_value)" ]
}

go_cached_build() {
    local stamp_dir=$1 out_dir=$2 build=$3 work start binary
    shift 3
    _go_built "$stamp_dir" "$out_dir" "$@" && return 0
    GO=$(go_toolchain)
    mkdir -p "$stamp_dir"
    exec 9>"$stamp_dir/.lock"
    flock 9
    _go_built "$stamp_dir" "$out_dir" "$@" && return 0  # built by whoever held the lock
    work=$(mktemp -d "$stamp_dir/.build.XXXXXX")
    # shellcheck disable=SC2064  # the directory is known now, and is what the trap removes
    trap "rm -rf '$work'" EXIT
    export CGO_ENABLED=0 GO111MODULE=on GOFLAGS=-mod=readonly
    start=$(date +%s)
    echo "testenv: building $name ${version:-} ..." >&2
    (cd "$module" && "$build" "$work") || die "building $name failed (see the go output above)"
    mkdir -p "$out_dir"
    for binary in "$@"; do mv -f "$work/$binary" "$out_dir/$binary"; done
    stamp_value >"$stamp_dir/stamp"
    echo "testenv: built $name ${version:-} in $(( $(date +%s) - start ))s: $out_dir" >&2
}
