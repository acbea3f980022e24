#!/usr/bin/env bash
# `make run-gateway`: the Gateway API example with no cluster. Starts the echo backends of
# services.yaml on loopback and twingress in front of them: HTTP on 127.0.0.1:8080, HTTPS on
# 127.0.0.1:8443, admin on 127.0.0.1:10254, or where HTTP, HTTPS and ADMIN say (examples/lib.sh).
# The Gateway's HTTP listener is served by the HTTP listener, as on a node (listener port 80,
# --http tcp:80): gateway.yaml's port is 8080, HTTP's default; with another HTTP port the
# example serves a copy of this directory whose Gateway listens on HTTP's port (the other files
# linked, so edits still go live). With HTTP off, the Gateway's listener opens 8080 of its own,
# on GATEWAY_INTERFACE (default 127.0.0.1). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
example=gateway
source examples/lib.sh

backend store-v1-pod tcp:8101:interface=127.0.0.1
backend store-v2-pod tcp:8102:interface=127.0.0.1
backend site-pod tcp:8103:interface=127.0.0.1
backends_ready

manifests=examples/gateway
if [[ -n $http ]]; then
    gateway_port=$(port_of "$http")
    gateway_url=http://$(address "$http")
else
    gateway_port=8080
    gateway_url=http://$(reach "$gateway_interface"):8080
fi
if [[ $gateway_port != 8080 ]]; then
    manifests=$work/gateway
    mkdir "$manifests"
    ln -s "$PWD"/examples/gateway/{routes,services}.yaml "$manifests"/
    sed "s/^      port: 8080$/      port: $gateway_port/" examples/gateway/gateway.yaml >"$manifests/gateway.yaml"
fi

serving
cat <<HINTS
  the Gateway's HTTP listener  $gateway_url/$([[ $manifests == examples/gateway ]] || echo "   (gateway.yaml's port 8080 made HTTP's $gateway_port, in $manifests)")
try:
  curl -H 'Host: store.example.com' $gateway_url/            # store-v1-pod 9 times in 10
  curl -H 'Host: store.example.com' -H 'env: canary' $gateway_url/
  curl -H 'Host: store.example.com' $gateway_url/shop/cart   # the backend sees /cart
  curl -i -H 'Host: example.com' $gateway_url/about          # 301 to www.example.com
  curl -s $admin_url/debug/routes                         # gatewayAPI: the status
HINTS
twingress --manifests "$manifests" "$@"
