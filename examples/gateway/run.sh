#!/usr/bin/env bash
# `make run-gateway`: the Gateway API example with no cluster. Starts the echo backends of
# services.yaml on loopback and twingress in front of them: HTTP on 127.0.0.1:8080 (the port of
# the Gateway's listener in gateway.yaml), HTTPS on 127.0.0.1:8443, admin on 127.0.0.1:10254, or
# where HTTP, HTTPS and ADMIN say (examples/lib.sh; an HTTP port other than 8080 leaves the
# Gateway's listener on 8080 of its own). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
example=gateway
source examples/lib.sh

backend store-v1-pod tcp:8101:interface=127.0.0.1
backend store-v2-pod tcp:8102:interface=127.0.0.1
backend site-pod tcp:8103:interface=127.0.0.1
backends_ready

serving
cat <<HINTS
  the Gateway's HTTP listener  http://127.0.0.1:8080/
try:
  curl -H 'Host: store.example.com' http://127.0.0.1:8080/            # store-v1-pod 9 times in 10
  curl -H 'Host: store.example.com' -H 'env: canary' http://127.0.0.1:8080/
  curl -H 'Host: store.example.com' http://127.0.0.1:8080/shop/cart   # the backend sees /cart
  curl -i -H 'Host: example.com' http://127.0.0.1:8080/about          # 301 to www.example.com
  curl -s $admin_url/debug/routes                                     # gatewayAPI: the status
HINTS
twingress --manifests examples/gateway "$@"
