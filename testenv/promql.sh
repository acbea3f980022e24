#!/usr/bin/env bash
# Build testenv/promql (a PromQL evaluator on github.com/prometheus/prometheus/promql, see its
# main.go) into ${TWINGRESS_CACHE:-$HOME/.cache/twingress}/testenv/promql-<hash>/promql-eval and
# print that path.  Idempotent: when the binary was built from the current go.mod, go.sum and
# main.go it does nothing (no Go needed).  The tests of --nginx-metrics run it (tests/proxy/
# test_nginx_metrics.py), and "promql-eval parse" reads every /metrics with Prometheus's own text
# parsers (tests/proxy/test_exposition.py), which is why it is built here, by a script, and cached.
#
# Why this and not Prometheus itself: one package tree (promql + tsdb) builds in about a minute on
# 2 cores and evaluates each dashboard expression directly, with Prometheus's own engine; a whole
# Prometheus (web UI assets, every service discovery) takes several times longer to build and
# would add a scrape loop and an HTTP API between the test and the answer.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/promql" && pwd)
cache_root=${TWINGRESS_CACHE:-$HOME/.cache/twingress}
hash=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)
out="$cache_root/testenv/promql-$hash"
if [ -x "$out/promql-eval" ]; then
    echo "$out/promql-eval"
    exit 0
fi
GO=${GO:-$(command -v go || true)}
if [ -z "$GO" ] && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
[ -n "$GO" ] && [ -x "$GO" ] || { echo "testenv/promql.sh: error: Go toolchain not found (install Go >= 1.26 or set GO)" >&2; exit 1; }
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if [ ! -x "$out/promql-eval" ]; then
    echo "testenv/promql.sh: building the PromQL evaluator (first time: about a minute)" >&2
    (cd "$here" && GOFLAGS=-mod=readonly nice "$GO" build -trimpath -ldflags='-s -w' -o "$out/promql-eval.tmp" .)
    mv "$out/promql-eval.tmp" "$out/promql-eval"
fi
echo "$out/promql-eval"
