#!/usr/bin/env bash
# `make run-gateway`: the Gateway API example with no cluster. Starts the echo backends of
# services.yaml on loopback and twingress in front of them: HTTP on 127.0.0.1:8080 (the Gateway's
# listener port), admin on 127.0.0.1:10254. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-.venv/bin/python}
admin=${ADMIN:-tcp:10254:interface=127.0.0.1}

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

"$py" examples/echo.py --listen tcp:8101:interface=127.0.0.1 --name store-v1-pod & pids+=($!)
"$py" examples/echo.py --listen tcp:8102:interface=127.0.0.1 --name store-v2-pod & pids+=($!)
"$py" examples/echo.py --listen tcp:8103:interface=127.0.0.1 --name site-pod & pids+=($!)

echo "twingress (Gateway API example): http on 127.0.0.1:8080, admin on ${admin}; try:"
echo "  curl -H 'Host: store.example.com' http://127.0.0.1:8080/            # store-v1-pod 9 times in 10"
echo "  curl -H 'Host: store.example.com' -H 'env: canary' http://127.0.0.1:8080/"
echo "  curl -H 'Host: store.example.com' http://127.0.0.1:8080/shop/cart   # the backend sees /cart"
echo "  curl -i -H 'Host: example.com' http://127.0.0.1:8080/about          # 301 to www.example.com"
echo "  curl -s http://127.0.0.1:10254/debug/routes                        # gatewayAPI: the status"
"$py" -c "import sys; from twisted.scripts.twistd import run; sys.exit(run())" \
    --pidfile= -n ingress --manifests examples/gateway \
    --http tcp:8080:interface=127.0.0.1 --https '' --admin "$admin" "$@" &
pids+=($!)
wait "${pids[-1]}"
