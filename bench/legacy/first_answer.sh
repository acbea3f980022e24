#!/usr/bin/env bash
# README's first-run promise, measured (issue 61): the time from `make run` in a fresh clone of
# this repository (no venv; pip's and h2stack.py's caches removed) to the first answer through
# the quickstart, the background compile's duration, and the second start's first answer on the
# compiled build. It stops each example as a terminal's Ctrl-C does (SIGINT to its process group).
# The listeners are moved off the defaults (18080, 18443, 20254); the echo backends keep theirs.
# Usage: python -m bench first-answer CLONE [make variables, e.g. CAN_COMPILE= for a machine without a compiler]
set -u
[ $# -ge 1 ] || { echo "usage: python -m bench first-answer CLONE [make variables, e.g. CAN_COMPILE=]" >&2; exit 2; }
clone=$1; shift
rm -rf "$clone" ~/.cache/pip ~/.cache/twingress/h2stack
git clone -q "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" "$clone" && cd "$clone"
export HTTP=tcp:18080:interface=127.0.0.1 HTTPS=tcp:18443:interface=127.0.0.1 ADMIN=tcp:20254:interface=127.0.0.1
answer() { curl -s -o /dev/null -w '%{http_code}' -H 'Host: echo.example.com' http://127.0.0.1:18080/hello 2>/dev/null; }
elapsed() { awk -v start="$start" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - start }'; }
start=$(date +%s.%N); echo "load: $(cat /proc/loadavg)"
setsid make run "$@" > run1.out 2>&1 &
runpid=$!
until [ "$(answer)" = 200 ]; do sleep 0.2; kill -0 $runpid 2>/dev/null || { echo "make run ended"; cat run1.out; exit 1; }; done
echo "first answer after $(elapsed) s"
cat run1.out
kill -INT -- -$runpid; wait $runpid; sleep 1; pgrep -af "$clone|examples/echo.py" | grep -v compile | grep -v first_answer || echo "everything the example started has stopped"
if [ -f .venv/compile.pid ]; then
  while kill -0 "$(cat .venv/compile.pid)" 2>/dev/null; do sleep 5; done
  echo "background compile ended after $(elapsed) s"; cat .venv/compile.log
  start=$(date +%s.%N)
  setsid make run "$@" > run2.out 2>&1 &
  runpid=$!
  until [ "$(answer)" = 200 ]; do sleep 0.2; kill -0 $runpid 2>/dev/null || { echo "make run ended"; cat run2.out; exit 1; }; done
  echo "second start: first answer after $(elapsed) s"; cat run2.out
  ls ingress/proxy/request/*.so | head -3; ls .venv/lib/python3*/site-packages/h2/*.so | head -2
  kill -INT -- -$runpid; wait $runpid
fi
echo "load: $(cat /proc/loadavg)"
