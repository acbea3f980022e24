# Sourced by each example's run.sh (from the repository's root): the backends, which must all
# listen before twingress starts; twingress's listeners from HTTP, HTTPS and ADMIN (Twisted
# endpoint descriptions, as --http/--https/--admin take them; an empty value turns one off);
# the address of the listeners the manifests open (StreamIngress ports, a Gateway listener on a
# port of its own) from STREAM_INTERFACE and GATEWAY_INTERFACE (--stream-interface and
# --gateway-interface: an address, '' for every IPv4 address); and the URLs they serve. Every one
# is on loopback unless told otherwise. Ctrl-C stops everything.
py=${PYTHON:-.venv/bin/python}
http=${HTTP-tcp:8080:interface=127.0.0.1}
https=${HTTPS-tcp:8443:interface=127.0.0.1}
admin=${ADMIN-tcp:10254:interface=127.0.0.1}
stream_interface=${STREAM_INTERFACE-127.0.0.1}
gateway_interface=${GATEWAY_INTERFACE-127.0.0.1}

pids=()
ready=$(mktemp -d)
work=$(mktemp -d)          # what an example generates at run time (a certificate, manifests)
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$ready" "$work"; }
trap cleanup EXIT          # once: a second SIGTERM would make twistd log a double reactor stop
trap 'exit 130' INT TERM

# backend NAME LISTEN [http|tcp|udp]: one echo backend (a "pod" of the example's EndpointSlices).
backend() {
    "$py" examples/echo.py --name "$1" --listen "$2" --protocol "${3:-http}" --ready "$ready/$1" &
    pids+=($!)
}

# backends_ready: until every backend listens. One that cannot (its port is taken: another
# example still running?) stops the example with its one line, before twingress starts.
backends_ready() {
    local deadline=$((SECONDS + 20)) file count
    while :; do
        count=0
        for file in "$ready"/*; do
            [[ -e $file ]] || continue
            if [[ $(<"$file") == failed:* ]]; then
                echo "$example: $(sed 's/^failed: //' "$file") (is another example running?)" >&2
                exit 1
            fi
            count=$((count + 1))
        done
        ((count == ${#pids[@]})) && return 0
        if ((SECONDS >= deadline)); then
            echo "$example: the backends did not start within 20 s" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# address DESCRIPTION: where a tcp: listener is reached (tcp:8080:interface=127.0.0.1 -> 127.0.0.1:8080).
address() {
    local description=${1#haproxy:} host=127.0.0.1 port="" part parts
    IFS=: read -ra parts <<<"$description"
    for part in "${parts[@]:1}"; do
        case $part in
            port=*) port=${part#port=} ;;
            interface=*) host=${part#interface=} ;;
            *=*) ;;
            *) [[ -n $port ]] || port=$part ;;
        esac
    done
    echo "$(reach "$host"):$port"
}

# port_of DESCRIPTION: the port of a tcp: listener (tcp:8080:interface=127.0.0.1 -> 8080).
port_of() {
    local at
    at=$(address "$1")
    echo "${at##*:}"
}

# reach INTERFACE: the address a client on this machine uses for a listener bound on INTERFACE
# (every address: 127.0.0.1).
reach() {
    case $1 in
        "" | 0.0.0.0 | ::) echo 127.0.0.1 ;;
        *) echo "$1" ;;
    esac
}

# bound INTERFACE: how the banner names a listener's address ('' is every IPv4 address).
bound() {
    case $1 in
        "" | 0.0.0.0) echo "every IPv4 address" ;;
        ::) echo "every address" ;;
        *) echo "$1 only" ;;
    esac
}

# serving: the URLs of the listeners that are on; $url is the first of HTTP and HTTPS (for the
# example's hints), $admin_url the admin listener's.
serving() {
    echo "twingress ($example):"
    [[ -z $http ]] || echo "  HTTP   http://$(address "$http")/"
    [[ -z $https ]] || echo "  HTTPS  https://$(address "$https")/   (the self-signed default certificate: curl -k)"
    [[ -z $admin ]] || echo "  admin  http://$(address "$admin")/   (lists /healthz /readyz /metrics /debug/routes)"
    if [[ -n $http ]]; then url=http://$(address "$http"); else url="-k https://$(address "${https:-tcp:8443}")"; fi
    admin_url=http://$(address "${admin:-tcp:10254}")
}

# twingress ARGS...: twistd -n ingress with the listeners above, in the background; the script
# waits for it (and ends when it does).
twingress() {
    "$py" -c "import sys; from twisted.scripts.twistd import run; sys.exit(run())" \
        --pidfile= -n ingress --http "$http" --https "$https" --admin "$admin" \
        --stream-interface "$stream_interface" --gateway-interface "$gateway_interface" "$@" &
    pids+=($!)
    wait "${pids[-1]}"
}
