#!/usr/bin/env bash
# `make run`: the quickstart demo with no cluster. Starts three echo backends on loopback
# (the "pods" of examples/quickstart/services.yaml) and twingress in front of them:
# HTTP on 127.0.0.1:8080, HTTPS on 127.0.0.1:8443 (the generated default certificate),
# admin on 127.0.0.1:10254. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-.venv/bin/python}
http=${HTTP:-tcp:8080:interface=127.0.0.1}
admin=${ADMIN:-tcp:10254:interface=127.0.0.1}
https=${HTTPS:-tcp:8443:interface=127.0.0.1}

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT          # once: a second SIGTERM would make twistd log a double reactor stop
trap 'exit 130' INT TERM

"$py" examples/echo.py --listen tcp:8081:interface=127.0.0.1 --name echo-pod-a & pids+=($!)
"$py" examples/echo.py --listen tcp:8081:interface=127.0.0.2 --name echo-pod-b & pids+=($!)
"$py" examples/echo.py --listen tcp:8082:interface=127.0.0.1 --name api-pod-a & pids+=($!)

echo "twingress: http on ${http}, admin on ${admin}; try:"
echo "  curl -H 'Host: echo.example.com' http://127.0.0.1:8080/"
"$py" -c "import sys; from twisted.scripts.twistd import run; sys.exit(run())" \
    --pidfile= -n ingress --manifests examples/quickstart --http "$http" --https "$https" --admin "$admin" "$@" &
pids+=($!)
wait "${pids[-1]}"
