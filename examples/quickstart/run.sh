#!/usr/bin/env bash
# `make run`: the quickstart demo with no cluster. Starts three echo backends on loopback
# (the "pods" of examples/quickstart/services.yaml) and twingress in front of them: HTTP on
# 127.0.0.1:8080, HTTPS on 127.0.0.1:8443 (the generated default certificate), admin on
# 127.0.0.1:10254, or where HTTP, HTTPS and ADMIN say (examples/lib.sh). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."
example=quickstart
source examples/lib.sh

backend echo-pod-a tcp:8081:interface=127.0.0.1
backend echo-pod-b tcp:8081:interface=127.0.0.2
backend api-pod-a tcp:8082:interface=127.0.0.1
backends_ready

serving
cat <<HINTS
try:
  curl -H 'Host: echo.example.com' $url/            # echo-pod-a or echo-pod-b
  curl -H 'Host: echo.example.com' $url/api/hello   # api-pod-a
  curl -H 'Host: shop.apps.example.com' $url/       # a wildcard host: api-pod-a
HINTS
twingress --manifests examples/quickstart "$@"
