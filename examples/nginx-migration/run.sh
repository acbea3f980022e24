#!/usr/bin/env bash
# `make run-migration`: the ingress-nginx migration example with no cluster. Starts the echo
# backends of services.yaml on loopback and twingress in front of them with the example's
# ingress-nginx ConfigMap: HTTP on 127.0.0.1:8080, admin on 127.0.0.1:10254. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-.venv/bin/python}
http=${HTTP:-tcp:8080:interface=127.0.0.1}
admin=${ADMIN:-tcp:10254:interface=127.0.0.1}

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

"$py" examples/echo.py --listen tcp:8091:interface=127.0.0.1 --name shop-pod-a & pids+=($!)
"$py" examples/echo.py --listen tcp:8091:interface=127.0.0.2 --name shop-pod-b & pids+=($!)
"$py" examples/echo.py --listen tcp:8092:interface=127.0.0.1 --name shop-v2-pod & pids+=($!)
for n in 1 2 3; do
    "$py" examples/echo.py --listen "tcp:8093:interface=127.0.0.$n" --name "api-pod-$n" & pids+=($!)
done

echo "twingress (ingress-nginx migration example): http on ${http}, admin on ${admin}; try:"
echo "  curl -i -H 'Host: shop.example.com' http://127.0.0.1:8080/shop/cart"
echo "  curl -i -H 'Host: example.com' http://127.0.0.1:8080/"
echo "  curl -s http://127.0.0.1:10254/debug/routes"
"$py" -c "import sys; from twisted.scripts.twistd import run; sys.exit(run())" \
    --pidfile= -n ingress --manifests examples/nginx-migration \
    --nginx-configmap ingress-nginx/ingress-nginx-controller \
    --http "$http" --https '' --admin "$admin" "$@" &
pids+=($!)
wait "${pids[-1]}"
