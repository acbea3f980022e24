// grpcecho answers every gRPC unary call with the request's message, over h2c.
//
// It is the backend of the benches' gRPC kind (bench/lib/site.py): the same bytes a gRPC server
// sends (a length-prefixed message, then grpc-status 0 in trailers), from Go's
// standard HTTP/2 server, so that the backend is never what limits the proxies.
// No gRPC library: nothing here needs one, and the build needs no module downloads.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
)

func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Trailer", "Grpc-Status")
	w.WriteHeader(http.StatusOK)
	w.Write(body) // the request's length-prefixed message, as is
	w.Header().Set("Grpc-Status", "0")
}

func main() {
	listen := flag.String("listen", "127.0.0.1:50051", "address to serve h2c on")
	flag.Parse()
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	server := &http.Server{Addr: *listen, Handler: http.HandlerFunc(echo), Protocols: protocols}
	log.Fatal(server.ListenAndServe())
}
