#!/usr/bin/env bash
# The Gateway API CRDs (standard channel) for the test apiserver, taken from the
# sigs.k8s.io/gateway-api Go module of the version the conformance suite is pinned at
# (testenv/gateway-conformance/go.mod: one pin for both), into
#
#   ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-api-<version>/
#
# tests/kube installs them, so the CRDs' own schema and CEL validation judge every object the
# tests create.  k8s/ does not copy them: operators install the release's CRDs themselves
# (docs/gateway-api.md).  The suite refuses CRDs of another bundle version than its own
# (conformance/utils/suite/suite.go: "the installed CRDs version is different from the suite
# version"), so our own tests use the same ones.  Idempotent; the last line of output is always
# the directory.
#
#   testenv/gateway-api.sh              fetch if needed, print the directory
#   testenv/gateway-api.sh --print-dir  print the directory, fetch nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(awk '{ for (i = 1; i < NF; i++) if ($i == "sigs.k8s.io/gateway-api/conformance") { print $(i + 1); exit } }' "$here/gateway-conformance/go.mod")
kinds=(gatewayclasses gateways httproutes grpcroutes referencegrants tlsroutes tcproutes udproutes)

die() { echo "testenv/gateway-api.sh: error: $*" >&2; exit 1; }
[ -n "$version" ] || die "no sigs.k8s.io/gateway-api/conformance requirement in $here/gateway-conformance/go.mod"
dir=${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/gateway-api-$version

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
python3 - "$zip" "$dir" "$version" "${kinds[@]}" <<'PY'
import pathlib
import sys
import zipfile

zip_path, target, version, kinds = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
prefix = f"sigs.k8s.io/gateway-api@{version}/config/crd/standard/"
with zipfile.ZipFile(zip_path) as archive:
    for kind in kinds:
        name = f"gateway.networking.k8s.io_{kind}.yaml"
        (target / name).write_bytes(archive.read(prefix + name))
PY
complete || die "the module lacks some CRDs: $(ls "$dir")"
echo "testenv/gateway-api.sh: Gateway API $version CRDs in $dir" >&2
echo "$dir"
