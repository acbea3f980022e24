#!/bin/sh
# Install what the benchmarks in bench/ need: nginx (backend and reference proxy),
# wrk (load generator), taskset (util-linux, CPU pinning), and for the streams scenario
# haproxy and socat (reference proxies) and iperf3 (TCP load), and valgrind (instructions,
# h2-path --instructions: instructions per request), and perf (workers-cost: syscalls and context
# switches per request, from the kernel's software counters).  Its UDP load tool
# (bench/udpload) needs Go, which this does not install: the same Go as testenv/build.sh
# ($GO, go on PATH, or /usr/local/go/bin/go; https://go.dev/dl/).
# Idempotent: does nothing when all are already on PATH (or in /usr/sbin).
set -eu

have() { command -v "$1" >/dev/null 2>&1; }
have_nginx() { have nginx || [ -x /usr/sbin/nginx ]; }

have_streams() { (have haproxy || [ -x /usr/sbin/haproxy ]) && have socat && have iperf3; }
have_go() { [ -n "${GO:-}" ] && [ -x "$GO" ] || have go || [ -x /usr/local/go/bin/go ]; }
have_go || echo "bench/setup.sh: warning: no Go toolchain; the streams, mix and gRPC scenarios need one for their load and backend" >&2

if have_nginx && have wrk && have taskset && have_streams && have valgrind && have perf; then
    echo "bench/setup.sh: nginx, wrk, taskset, haproxy, socat, iperf3, valgrind and perf already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    have sudo || { echo "bench/setup.sh: need root or sudo to apt-get install" >&2; exit 1; }
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y nginx wrk util-linux haproxy socat iperf3 valgrind linux-perf

# The nginx package may start a system nginx on :80; the benchmark does not use it
# (it runs its own nginx instances on free 127.0.0.1 ports).
have_nginx && have wrk && have taskset && have_streams && have valgrind && have perf
echo "bench/setup.sh: done"
