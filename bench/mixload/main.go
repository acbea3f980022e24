// mixload is the load of python -m bench mix (bench/scenarios/mix.py): a realistic mix in which
// TLS handshakes dominate, which no stock load generator makes (h2load neither resumes
// sessions across connections nor closes after N requests; wrk keeps connections alive).
//
// For -duration, -c workers each open connection after connection to -addr, TLS 1.3 only,
// SNI -sni, the server's certificate verified against -ca for that name. Connection n is,
// in a fixed pattern (so every proxy gets the same mix whatever its speed):
//
//   - a browser (the first -h2 of every -h2 + -h1 connections): ALPN h2 only, one GET,
//     then 9 more at once (a page, then its assets), then close;
//   - an HTTP/1.1 client (the other -h1): ALPN http/1.1 only, one GET with
//     "Connection: close", then close;
//
// and every other cycle of the pattern offers a session ticket received on an earlier
// connection (each ticket used once, as browsers do), so half of each kind offers one (at the
// start of a run such a connection waits up to 2 s for the first ticket to arrive).
// Whether the server took it is tls.ConnectionState.DidResume, counted; the run fails
// (exit 1) when the resumed share is outside 0.5 +/- -tolerance. Every response must be
// 200 with body -body (and HTTP/2 for browsers): anything else is a counted error and exit 1.
// A worker finishes the connection it is on when the time is up, so every connection
// counted was whole. The result is one JSON object on stdout.
//
// Standard library only (net/http's own HTTP/2 client through Transport.NewClientConn):
// the build needs no module downloads.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tickets is a client session cache whose tickets are used once each: Get takes the newest.
type tickets struct {
	mu    sync.Mutex
	byKey map[string][]*tls.ClientSessionState
	limit int
}

func (t *tickets) Get(key string) (*tls.ClientSessionState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.byKey[key]
	if len(list) == 0 {
		return nil, false
	}
	cs := list[len(list)-1]
	t.byKey[key] = list[:len(list)-1]
	return cs, true
}

func (t *tickets) Put(key string, cs *tls.ClientSessionState) {
	if cs == nil { // the client forgets a session the server refused: it was used already
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	list := append(t.byKey[key], cs)
	if len(list) > t.limit {
		list = list[len(list)-t.limit:]
	}
	t.byKey[key] = list
}

// take waits up to timeout for a ticket for key and takes it: at the start of a run the
// workers that should resume start before any full handshake has brought a ticket.
func (t *tickets) take(key string, timeout time.Duration) *tls.ClientSessionState {
	for end := time.Now().Add(timeout); ; time.Sleep(time.Millisecond) {
		if cs, ok := t.Get(key); ok {
			return cs
		} else if time.Now().After(end) {
			return nil
		}
	}
}

// oneTicket offers one ticket taken from the store, and stores the new ones.
type oneTicket struct {
	*tickets
	ticket *tls.ClientSessionState
}

func (o *oneTicket) Get(string) (*tls.ClientSessionState, bool) {
	cs := o.ticket
	o.ticket = nil
	return cs, cs != nil
}

// keepOnly stores the tickets of full-handshake connections without offering one.
type keepOnly struct{ *tickets }

func (keepOnly) Get(string) (*tls.ClientSessionState, bool) { return nil, false }

// kind of connection, and what was counted for it.
type kind struct {
	name        string
	Connections int64 `json:"connections"`
	Offered     int64 `json:"offered_ticket"`
	NoTicket    int64 `json:"no_ticket"` // should have offered one, none had come within 2 s
	Resumed     int64 `json:"resumed"`
	Requests    int64 `json:"requests"`
	Errors      int64 `json:"errors"`
}

type sample struct {
	handshake time.Duration
	life      time.Duration
	resumed   bool
}

type negotiated struct {
	Version string `json:"version"`
	Cipher  string `json:"cipher"`
	Group   string `json:"group"`
	ALPN    string `json:"alpn"`
}

type load struct {
	addr, sni, host, path string
	body                  []byte
	full, resume          *tls.Config
	store                 *tickets
	transport             *http.Transport
	deadline              time.Time
	h2Weight, h1Weight    int64
	next                  atomic.Int64

	h2, h1     kind
	mu         sync.Mutex
	samples    map[string][]sample
	errSamples []string
	seen       map[string]negotiated
}

type dialKey struct{}

// dialHolder carries, through NewClientConn's context, the config to dial with and the
// TLS connection made, so that its ConnectionState can be read.
type dialHolder struct {
	config *tls.Config
	conn   *tls.Conn
	took   time.Duration
}

func (l *load) dialTLS(ctx context.Context, config *tls.Config) (*tls.Conn, time.Duration, error) {
	began := time.Now()
	raw, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", l.addr)
	if err != nil {
		return nil, 0, err
	}
	conn := tls.Client(raw, config)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, 0, err
	}
	return conn, time.Since(began), nil
}

func (l *load) fail(k *kind, err error) {
	atomic.AddInt64(&k.Errors, 1)
	l.mu.Lock()
	if len(l.errSamples) < 10 {
		l.errSamples = append(l.errSamples, fmt.Sprintf("%s: %v", k.name, err))
	}
	l.mu.Unlock()
}

func (l *load) record(k *kind, state tls.ConnectionState, s sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples[k.name] = append(l.samples[k.name], s)
	key := fmt.Sprintf("%s resumed=%t", k.name, state.DidResume)
	if _, ok := l.seen[key]; !ok {
		l.seen[key] = negotiated{tls.VersionName(state.Version), tls.CipherSuiteName(state.CipherSuite),
			state.CurveID.String(), state.NegotiatedProtocol}
	}
}

func (l *load) check(status int, proto int, body []byte, wantProto int) error {
	if status != http.StatusOK || proto != wantProto || string(body) != string(l.body) {
		return fmt.Errorf("HTTP/%d %d, body %.100q", proto, status, body)
	}
	return nil
}

// browser: one h2 connection, one GET, then 9 at once, then close.
func (l *load) browser(ctx context.Context, config *tls.Config) {
	k := &l.h2
	holder := &dialHolder{config: config}
	began := time.Now()
	cc, err := l.transport.NewClientConn(context.WithValue(ctx, dialKey{}, holder), "https", l.addr)
	if err != nil {
		l.fail(k, fmt.Errorf("connect: %w", err))
		return
	}
	defer cc.Close()
	state := holder.conn.ConnectionState()
	if state.NegotiatedProtocol != "h2" {
		l.fail(k, fmt.Errorf("ALPN chose %q, not h2", state.NegotiatedProtocol))
		return
	}
	get := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+l.host+l.path, nil)
		if err != nil {
			return err
		}
		resp, err := cc.RoundTrip(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := l.check(resp.StatusCode, resp.ProtoMajor, body, 2); err != nil {
			return err
		}
		atomic.AddInt64(&k.Requests, 1)
		return nil
	}
	if err := get(); err != nil {
		l.fail(k, err)
		return
	}
	var wg sync.WaitGroup
	errs := make(chan error, 9)
	for range 9 {
		wg.Go(func() {
			if err := get(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		l.fail(k, err)
	}
	l.record(k, state, sample{holder.took, time.Since(began), state.DidResume})
	atomic.AddInt64(&k.Connections, 1)
	if state.DidResume {
		atomic.AddInt64(&k.Resumed, 1)
	}
}

// client11: one HTTP/1.1 request with Connection: close, then close.
func (l *load) client11(ctx context.Context, config *tls.Config) {
	k := &l.h1
	began := time.Now()
	conn, took, err := l.dialTLS(ctx, config)
	if err != nil {
		l.fail(k, fmt.Errorf("connect: %w", err))
		return
	}
	defer conn.Close()
	state := conn.ConnectionState()
	request := "GET " + l.path + " HTTP/1.1\r\nHost: " + l.host + "\r\nUser-Agent: mixload\r\nConnection: close\r\n\r\n"
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		l.fail(k, err)
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		l.fail(k, err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		err = l.check(resp.StatusCode, resp.ProtoMajor, body, 1)
	}
	if err != nil {
		l.fail(k, err)
		return
	}
	atomic.AddInt64(&k.Requests, 1)
	l.record(k, state, sample{took, time.Since(began), state.DidResume})
	atomic.AddInt64(&k.Connections, 1)
	if state.DidResume {
		atomic.AddInt64(&k.Resumed, 1)
	}
}

func (l *load) worker(ctx context.Context) {
	cycle := l.h2Weight + l.h1Weight
	for time.Now().Before(l.deadline) {
		n := l.next.Add(1) - 1
		k, config, offer := &l.h1, l.full, (n/cycle)%2 == 1
		if n%cycle < l.h2Weight {
			k = &l.h2
		}
		if offer {
			if ticket := l.store.take(l.sni, 2*time.Second); ticket != nil {
				config = l.resume.Clone()
				config.ClientSessionCache = &oneTicket{l.store, ticket}
				atomic.AddInt64(&k.Offered, 1)
			} else {
				atomic.AddInt64(&k.NoTicket, 1)
			}
		}
		if k == &l.h2 {
			l.browser(ctx, config)
		} else {
			l.client11(ctx, config)
		}
	}
}

type stats struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
}

func summarize(values []time.Duration) stats {
	if len(values) == 0 {
		return stats{}
	}
	slices.Sort(values)
	var sum time.Duration
	for _, v := range values {
		sum += v
	}
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	at := func(q float64) time.Duration { return values[min(len(values)-1, int(q*float64(len(values))))] }
	return stats{int64(len(values)), ms(sum / time.Duration(len(values))), ms(at(0.5)), ms(at(0.99))}
}

func main() {
	addr := flag.String("addr", "", "host:port to connect to (required)")
	sni := flag.String("sni", "bench.local", "TLS server name, also the name the certificate is verified for")
	host := flag.String("host", "bench.local", "Host header / :authority")
	path := flag.String("path", "/", "request path")
	body := flag.String("body", "hello world\n", "the body every response must have")
	caFile := flag.String("ca", "", "PEM file of the certificate(s) to trust (required)")
	workers := flag.Int("c", 32, "concurrent clients")
	duration := flag.Duration("duration", 10*time.Second, "how long new connections are started")
	h2Weight := flag.Int64("h2", 1, "browser (h2) connections in every -h2 + -h1")
	h1Weight := flag.Int64("h1", 1, "HTTP/1.1 connections in every -h2 + -h1")
	groups := flag.String("groups", "X25519", "key exchange groups offered, comma-separated (X25519, P256, X25519MLKEM768), or 'default' for Go's")
	tolerance := flag.Float64("tolerance", 0.05, "the resumed share must be within 0.5 +/- this")
	flag.Parse()
	if *addr == "" || *caFile == "" || *workers < 1 || *h2Weight < 0 || *h1Weight < 0 || *h2Weight+*h1Weight < 1 {
		fmt.Fprintln(os.Stderr, "mixload: need -addr, -ca, -c >= 1 and -h2 + -h1 >= 1")
		os.Exit(2)
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mixload: %v\n", err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fmt.Fprintf(os.Stderr, "mixload: no certificate in %s\n", *caFile)
		os.Exit(2)
	}
	var curves []tls.CurveID
	if *groups != "default" {
		names := map[string]tls.CurveID{"X25519": tls.X25519, "P256": tls.CurveP256, "X25519MLKEM768": tls.X25519MLKEM768}
		for _, name := range strings.Split(*groups, ",") {
			id, ok := names[name]
			if !ok {
				fmt.Fprintf(os.Stderr, "mixload: unknown group %q\n", name)
				os.Exit(2)
			}
			curves = append(curves, id)
		}
	}
	store := &tickets{byKey: map[string][]*tls.ClientSessionState{}, limit: 4096}
	full := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: *sni, RootCAs: pool,
		CurvePreferences: curves, ClientSessionCache: keepOnly{store}}
	resume := full.Clone() // given a oneTicket cache per connection

	l := &load{addr: *addr, sni: *sni, host: *host, path: *path, body: []byte(*body), full: full, resume: resume, store: store,
		h2Weight: *h2Weight, h1Weight: *h1Weight, samples: map[string][]sample{}, seen: map[string]negotiated{}}
	l.h2.name, l.h1.name = "h2", "http/1.1"
	protocols := new(http.Protocols)
	protocols.SetHTTP2(true)
	l.transport = &http.Transport{Protocols: protocols, ForceAttemptHTTP2: true,
		DialTLSContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			holder, ok := ctx.Value(dialKey{}).(*dialHolder)
			if !ok {
				return nil, errors.New("dial outside NewClientConn")
			}
			config := holder.config.Clone()
			config.NextProtos = []string{"h2"}
			conn, took, err := l.dialTLS(ctx, config)
			holder.conn, holder.took = conn, took
			return conn, err
		}}
	// The ALPN each kind offers: browsers h2 only (their check wants h2), HTTP/1.1 clients http/1.1.
	l.full.NextProtos, l.resume.NextProtos = []string{"http/1.1"}, []string{"http/1.1"}

	ctx := context.Background()
	began := time.Now()
	l.deadline = began.Add(*duration)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() { l.worker(ctx) })
	}
	wg.Wait()
	elapsed := time.Since(began).Seconds()

	connections := l.h2.Connections + l.h1.Connections
	resumed := l.h2.Resumed + l.h1.Resumed
	requests := l.h2.Requests + l.h1.Requests
	errorsCount := l.h2.Errors + l.h1.Errors
	share := 0.0
	if connections > 0 {
		share = float64(resumed) / float64(connections)
	}
	var problems []string
	if errorsCount > 0 {
		problems = append(problems, fmt.Sprintf("%d errors", errorsCount))
	}
	if connections == 0 {
		problems = append(problems, "no connection completed")
	} else if math.Abs(share-0.5) > *tolerance {
		problems = append(problems, fmt.Sprintf("resumed share %.3f is not 0.5 +/- %.2f (%d of %d connections resumed, %d offered a ticket)",
			share, *tolerance, resumed, connections, l.h2.Offered+l.h1.Offered))
	}
	durations := map[string]stats{}
	for name, list := range l.samples {
		var hsFull, hsResumed, life []time.Duration
		for _, s := range list {
			life = append(life, s.life)
			if s.resumed {
				hsResumed = append(hsResumed, s.handshake)
			} else {
				hsFull = append(hsFull, s.handshake)
			}
		}
		durations[name+" handshake full"] = summarize(hsFull)
		durations[name+" handshake resumed"] = summarize(hsResumed)
		durations[name+" connection"] = summarize(life)
	}
	out := map[string]any{
		"ok": len(problems) == 0, "problems": problems, "seconds": math.Round(elapsed*1000) / 1000,
		"workers": *workers, "mix": map[string]int64{"h2": *h2Weight, "http/1.1": *h1Weight},
		"connections": connections, "requests": requests, "errors": errorsCount, "error_samples": l.errSamples,
		"handshakes":    map[string]int64{"full": connections - resumed, "resumed": resumed},
		"resumed_share": math.Round(share*10000) / 10000,
		"h2":            l.h2, "http/1.1": l.h1, "negotiated": l.seen, "durations_ms": durations,
	}
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	encoder.Encode(out)
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "mixload: %s\n", strings.Join(problems, "; "))
		os.Exit(1)
	}
}
