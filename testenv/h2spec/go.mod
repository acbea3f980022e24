// h2spec, the HTTP/2 conformance suite (github.com/summerwind/h2spec), for tests/proxy/test_h2spec.py;
// testenv/h2spec.sh builds its cmd/h2spec from the version required here.
//
// v2.2.1+incompatible is the newest h2spec the Go module proxy serves here: later tags (v2.3.0-v2.6.0)
// carry a go.mod whose module path lacks /v2, so they are not valid module versions, and the proxy
// answers 403 for pseudo-versions of their commits. v2.2.1 has no go.mod of its own; its
// dependencies were pinned by dep (Gopkg.lock: golang.org/x/net of 2016, ...), untagged commits the
// proxy refuses too, so they are the tagged versions `go mod tidy` chose. testenv/README.md has more.
module twingress.io/testenv/h2spec

go 1.26.0

tool github.com/summerwind/h2spec/cmd/h2spec

require (
	github.com/fatih/color v1.19.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/summerwind/h2spec v2.2.1+incompatible // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
