#!/usr/bin/env bash
# The Gateway API CRDs (experimental channel) for the test apiserver, taken from the
# sigs.k8s.io/gateway-api Go module of the version the conformance suite is pinned at
# (testenv/gateway-conformance/go.mod: one pin for both), into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-api-<version>-<channel>/
#
# tests/kube installs them, so the CRDs' own schema and CEL validation judge every object the
# tests create.  k8s/ does not copy them: operators install the release's CRDs themselves
# (docs/gateway-api.md).  The suite refuses CRDs of another bundle version than its own
# (conformance/utils/suite/suite.go: "the installed CRDs version is different from the suite
# version"), so our own tests use the same ones.
#
# The experimental channel (config/crd/experimental), not the standard one: v1.6.3's standard
# HTTPRoute has no rules[].retry (GEP-1731; standard from v1.7.0), so the apiserver would prune
# it and the suite's HTTPRouteRetry test could never reach twingress.  Both channels serve the
# kinds twingress watches at the same versions (v1; ReferenceGrant v1beta1 too) with the same
# storage versions; the experimental one adds fields and serves some older versions besides.
# All eight come from one channel: the suite refuses a mix ("multiple gateway API CRDs channels
# detected").  Idempotent; the last line of output is always the directory.
#
#   testenv/gateway-api.sh              fetch if needed, print the directory
#   testenv/gateway-api.sh --print-dir  print the directory, fetch nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(awk '{ for (i = 1; i < NF; i++) if ($i == "sigs.k8s.io/gateway-api/conformance") { print $(i + 1); exit } }' "$here/gateway-conformance/go.mod")
channel=experimental
kinds=(gatewayclasses gateways httproutes grpcroutes referencegrants tlsroutes tcproutes udproutes)

die() { echo "testenv/gateway-api.sh: error: $*" >&2; exit 1; }
[ -n "$version" ] || die "no sigs.k8s.io/gateway-api/conformance requirement in $here/gateway-conformance/go.mod"
dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-api-$version-$channel

case "${1:-}" in
    --print-dir) echo "$dir"; exit 0 ;;
    "") ;;
    *) die "unknown argument: $1" ;;
esac

complete() {
    local kind
    for kind in "${kinds[@]}"; do [ -s "$dir/gateway.networking.k8s.io_$kind.yaml" ] || return 1; done
}
if complete; then
    echo "$dir"
    exit 0
fi

GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || die "Go not found: the CRDs come from the sigs.k8s.io/gateway-api module (set GO=/path/to/go)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# `go mod download` fetches and verifies the module zip (go.sum database); only its YAML is read.
(cd "$work" && GOFLAGS=-mod=mod "$GO" mod download -json "sigs.k8s.io/gateway-api@$version" >"$work/download.json") || true
zip=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("Zip", ""))' "$work/download.json")
[ -n "$zip" ] && [ -s "$zip" ] || die "could not download sigs.k8s.io/gateway-api@$version: $(cat "$work/download.json")"
mkdir -p "$dir"
python3 - "$zip" "$dir" "$version" "$channel" "${kinds[@]}" <<'PY'
import pathlib
import sys
import zipfile

zip_path, target, version, channel, kinds = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
prefix = f"sigs.k8s.io/gateway-api@{version}/config/crd/{channel}/"
with zipfile.ZipFile(zip_path) as archive:
    for kind in kinds:
        name = f"gateway.networking.k8s.io_{kind}.yaml"
        data = archive.read(prefix + name)
        if f"gateway.networking.k8s.io/channel: {channel}".encode() not in data:
            sys.exit(f"testenv/gateway-api.sh: error: {prefix}{name} is not of the {channel} channel")
        (target / name).write_bytes(data)
PY
complete || die "the module lacks some CRDs: $(ls "$dir")"
echo "testenv/gateway-api.sh: Gateway API $version CRDs ($channel channel) in $dir" >&2
echo "$dir"
