// Command caddy is Caddy 2 with its standard modules, built for the benches beside Traefik (bench/lib/peers.py).
//
// Caddy's own cmd/caddy is this program too; it lives in a module of ours so that
// go.mod pins the version we measured and go.sum its dependencies (see bench/peers.sh).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() {
	caddycmd.Main()
}
