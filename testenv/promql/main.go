// Command promql-eval evaluates PromQL expressions with Prometheus's own engine against samples
// given on stdin, so that tests can check that dashboards written for another exporter find
// series in ours.  Input (JSON on stdin):
//
//	{"samples": [{"labels": {"__name__": "m", "a": "b"}, "t": <ms>, "v": <float>}, ...],
//	 "queries": [{"expr": "sum(rate(m[2m]))", "t": <ms>}, ...]}
//
// Output (JSON on stdout): one object per query, in order: {"expr", "series", "error"}; "series"
// is the number of series (or 1 for a scalar/string) the instant query returned.
//
// "promql-eval parse" reads a /metrics body (the text format, version 0.0.4) on stdin instead and
// parses it twice, with the two parsers Prometheus's own code uses: expfmt's TextParser
// (github.com/prometheus/common/expfmt, as client_golang and promtool read the format) and the
// scraper's textparse.PromParser (what a Prometheus server stores).  Output (JSON on stdout):
//
//	{"families": {"<name>": {"type": "counter", "metrics": <n>}, ...},   (expfmt; empty ones dropped)
//	 "types": {"<name>": "counter", ...},                                (the scraper's TYPE entries)
//	 "series": [{"labels": {"__name__": "m", ...}, "v": <float>}, ...]}  (the scraper's samples)
//
// Either parser's error ends the command with status 1 and the error on stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"
)

type sample struct {
	Labels map[string]string `json:"labels"`
	T      int64             `json:"t"`
	V      float64           `json:"v"`
}

type query struct {
	Expr string `json:"expr"`
	T    int64  `json:"t"`
}

type input struct {
	Samples []sample `json:"samples"`
	Queries []query  `json:"queries"`
}

type result struct {
	Expr   string `json:"expr"`
	Series int    `json:"series"`
	Error  string `json:"error,omitempty"`
}

type family struct {
	Type    string `json:"type"`
	Metrics int    `json:"metrics"`
}

type series struct {
	Labels map[string]string `json:"labels"`
	V      float64           `json:"v"`
}

type parsed struct {
	Families map[string]family `json:"families"`
	Types    map[string]string `json:"types"`
	Series   []series          `json:"series"`
}

func main() {
	command := run
	if len(os.Args) == 2 && os.Args[1] == "parse" {
		command = parse
	} else if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: promql-eval [parse] < input")
		os.Exit(2)
	}
	if err := command(); err != nil {
		fmt.Fprintln(os.Stderr, "promql-eval:", err)
		os.Exit(1)
	}
}

func run() error {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return fmt.Errorf("reading input: %w", err)
	}
	dir, err := os.MkdirTemp("", "promql-eval-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return fmt.Errorf("opening tsdb: %w", err)
	}
	defer db.Close()
	if err := load(db, in.Samples); err != nil {
		return err
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50000000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	results := make([]result, 0, len(in.Queries))
	for _, q := range in.Queries {
		results = append(results, evaluate(engine, db, q))
	}
	return json.NewEncoder(os.Stdout).Encode(results)
}

func load(db *tsdb.DB, samples []sample) error {
	sort.SliceStable(samples, func(i, j int) bool { return samples[i].T < samples[j].T })
	app := db.Appender(context.Background())
	for _, s := range samples {
		if _, err := app.Append(0, labels.FromMap(s.Labels), s.T, s.V); err != nil {
			return fmt.Errorf("appending %v: %w", s.Labels, err)
		}
	}
	return app.Commit()
}

func evaluate(engine *promql.Engine, db *tsdb.DB, q query) result {
	out := result{Expr: q.Expr}
	query, err := engine.NewInstantQuery(context.Background(), db, nil, q.Expr, time.UnixMilli(q.T))
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer query.Close()
	res := query.Exec(context.Background())
	if res.Err != nil {
		out.Error = res.Err.Error()
		return out
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		out.Series = len(v)
	case promql.Matrix:
		out.Series = len(v)
	case promql.Scalar, promql.String:
		out.Series = 1
	default:
		out.Error = fmt.Sprintf("unexpected result type %s", res.Value.Type())
	}
	return out
}

// parse reads an exposition on stdin with expfmt's parser and with the scraper's.
func parse() error {
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("reading input: %w", err)
	}
	out := parsed{Families: map[string]family{}, Types: map[string]string{}, Series: []series{}}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("expfmt: %w", err)
	}
	for name, mf := range families {
		out.Families[name] = family{Type: strings.ToLower(mf.GetType().String()), Metrics: len(mf.GetMetric())}
	}
	scraper := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	for {
		entry, err := scraper.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("textparse: %w", err)
		}
		switch entry {
		case textparse.EntryType:
			name, kind := scraper.Type()
			out.Types[string(name)] = string(kind)
		case textparse.EntrySeries:
			var ls labels.Labels
			scraper.Labels(&ls)
			_, _, v := scraper.Series()
			out.Series = append(out.Series, series{Labels: ls.Map(), V: v})
		}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
