// Command echo is the HTTP backend of the node tests: every request gets a JSON description of
// itself and of the pod that answered it (pod name, namespace, IP from the downward API
// environment, the hostname), so a test sees which replica served it and what reached it.
//
// It listens on $PORT (default 8080); `echo get URL` is a one-shot client instead (get.go). /healthz answers 200 once listening (the readiness probe of
// the test Deployments). It exits 0 on SIGTERM or SIGINT after closing its listener.
// Static, FROM scratch (see testenv/node.sh): no registry is reachable from the test machine.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type reply struct {
	Pod       string              `json:"pod"`
	Namespace string              `json:"namespace"`
	PodIP     string              `json:"podIP"`
	Hostname  string              `json:"hostname"`
	Method    string              `json:"method"`
	Host      string              `json:"host"`
	Path      string              `json:"path"`
	Query     string              `json:"query"`
	Proto     string              `json:"proto"`
	Remote    string              `json:"remote"`
	Headers   map[string][]string `json:"headers"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "get" {
		os.Exit(get(os.Args[2:]))
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	hostname, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := json.Marshal(reply{
			Pod: os.Getenv("POD_NAME"), Namespace: os.Getenv("POD_NAMESPACE"), PodIP: os.Getenv("POD_IP"),
			Hostname: hostname, Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery,
			Proto: r.Proto, Remote: r.RemoteAddr, Headers: r.Header,
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(body, '\n'))
	})
	listener, err := net.Listen("tcp", ":"+port)
	if err != nil {
		log.Fatalf("echo: %v", err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}()
	log.Printf("echo: listening on %s as %s", listener.Addr(), hostname)
	if err := server.Serve(listener); err != http.ErrServerClosed {
		log.Fatalf("echo: %v", err)
	}
}
