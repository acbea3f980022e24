#!/usr/bin/env bash
# `make run-migration`: the ingress-nginx migration example with no cluster. Starts the echo
# backends of services.yaml on loopback and twingress in front of them with the example's
# ingress-nginx ConfigMap: HTTP on 127.0.0.1:8080, HTTPS on 127.0.0.1:8443, admin on
# 127.0.0.1:10254, or where HTTP, HTTPS and ADMIN say (examples/lib.sh). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
example=nginx-migration
source examples/lib.sh

backend shop-pod-a tcp:8091:interface=127.0.0.1
backend shop-pod-b tcp:8091:interface=127.0.0.2
backend shop-v2-pod tcp:8092:interface=127.0.0.1
for n in 1 2 3; do
    backend "api-pod-$n" "tcp:8093:interface=127.0.0.$n"
done
backends_ready

serving
cat <<HINTS
try:
  curl -i -H 'Host: shop.example.com' $url/shop/cart
  curl -i -H 'Host: example.com' $url/
  curl -s $admin_url/debug/routes
HINTS
twingress --manifests examples/nginx-migration --nginx-configmap ingress-nginx/ingress-nginx-controller "$@"
