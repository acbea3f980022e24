package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// get is the client side of the image, for pods that must reach something themselves (a
// hostNetwork pod reaching a pod IP, a pod reaching the apiserver through the kubernetes
// Service with its ServiceAccount token): `echo get [-token FILE] [-cacert FILE] URL` prints
// {"status": N, "body": "..."} and exits 0 when any HTTP response came back, 1 otherwise.
func get(args []string) int {
	flags := flag.NewFlagSet("get", flag.ContinueOnError)
	tokenFile := flags.String("token", "", "a file whose content is sent as the bearer token")
	caFile := flags.String("cacert", "", "PEM CA certificates to verify an https server with")
	if err := flags.Parse(args); err != nil || flags.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: echo get [-token FILE] [-cacert FILE] URL")
		return 2
	}
	request, err := http.NewRequest(http.MethodGet, flags.Arg(0), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo get:", err)
		return 2
	}
	transport := &http.Transport{}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo get:", err)
			return 1
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	if *tokenFile != "" {
		token, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo get:", err)
			return 1
		}
		request.Header.Set("Authorization", "Bearer "+string(token))
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	response, err := client.Do(request)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo get:", err)
		return 1
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(response.Body, 1<<20))
	out, _ := json.Marshal(map[string]any{"status": response.StatusCode, "body": string(body)})
	fmt.Println(string(out))
	return 0
}
