//go:build tools

// Package tools pins the Gateway API conformance suite and its echo server for the twingress
// test environment: testenv/gateway-conformance.sh builds `go test -c
// sigs.k8s.io/gateway-api/conformance` and `sigs.k8s.io/gateway-api/conformance/echo-basic`
// from the versions this module's go.mod requires.
package tools

import (
	_ "sigs.k8s.io/gateway-api/conformance"
	_ "sigs.k8s.io/gateway-api/conformance/echo-basic"
)
