// Command mixload drives the gateway with a set of different request
// bodies and measures escalated and non-escalated requests apart, from
// the decision headers each answer carries. Subcommands:
//
//	mixload gen    write a body set: chat completions from labelled JSONL
//	               texts, deduplicated, in a seeded order
//	mixload run    closed-loop load over a body set: throughput, latency
//	               per group (escalated to tier 2 or not), decision
//	               reasons and tiers, the gateway's CPU per request
//	mixload table  a markdown table of run records (medians over rounds),
//	               with the tier-2 targets checked
//	mixload embed  closed-loop load on an encoder service's
//	               /v1/embeddings: texts a second and per core-second
//
// A request is escalated when tier 2 was consulted: X-Triage-Tier is 2,
// or X-Triage-Reason says tier 2 was tried and did not answer (any reason
// beginning tier2_: tier2_timeout, tier2_error, tier2_unavailable,
// tier2_shed), or that the client left while it ran (client_gone;
// -escalated-reasons names the reasons besides tier2_*). Responses
// without decision headers (a gateway with no rules) are not escalated.
//
// The workers share one cursor over the body set, so a text comes back
// only after every other body has been sent once. Tier 2's result cache
// (least recently used out first) then finds it only if fewer texts than
// the cache holds were classified since: when tier 2 classifies every
// text, a set larger than the cache cycles through it without a hit; when
// tier 2 falls behind, the texts it did classify are found on the next
// pass, more of them the longer the run. Each run record is one JSON line
// (Record), appended to -out.
// bench/mixed.sh runs it against three gateway configs; by hand:
//
//	go run ./bench/mixload gen -out /tmp/bodies.jsonl datasets/examples/subjects.jsonl ../shared/datasets/subjects/dev.jsonl
//	go run ./bench/mixload run -bodies /tmp/bodies.jsonl -c 64 -d 10s -gw-pid PID -out runs.jsonl
//	go run ./bench/mixload table -in runs.jsonl
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mixload gen|run|table|embed [flags] (-h for each)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = cmdGen(os.Args[2:], os.Stdout, os.Stderr)
	case "run":
		err = cmdRun(os.Args[2:], os.Stdout)
	case "table":
		err = cmdTable(os.Args[2:], os.Stdout)
	case "embed":
		err = cmdEmbed(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown subcommand %q (gen, run, table, embed)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mixload:", err)
		os.Exit(1)
	}
}

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, "; ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

type runOptions struct {
	url       string
	conc      int
	dur       time.Duration
	warmup    time.Duration
	bodies    string
	headers   headerList
	gwPID     int
	encPID    int    // the encoder service's pid (encode serve), 0: none
	encURL    string // its /metrics
	timeout   time.Duration
	extra     string // more reasons that count as escalated
	out       string
	arm       string
	config    string
	round     int
	budget    time.Duration
	brief     bool
	jsonOnly  bool
	maxSample int
	rate      float64 // requests a second, open loop; 0: closed loop
}

func cmdRun(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var o runOptions
	fs.StringVar(&o.url, "url", "http://127.0.0.1:18010/v1/chat/completions", "endpoint (loopback only)")
	fs.IntVar(&o.conc, "c", 64, "concurrency: workers, one keep-alive connection each")
	fs.DurationVar(&o.dur, "d", 10*time.Second, "measured duration")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unrecorded load before the measured window")
	fs.StringVar(&o.bodies, "bodies", "", "request bodies: a JSONL file (one body a line, as mixload gen writes) or a directory of *.json files")
	fs.Var(&o.headers, "H", "extra request header 'Name: value' (repeatable)")
	fs.IntVar(&o.gwPID, "gw-pid", 0, "gateway pid: its process tree's CPU over the measured window, and peak RSS")
	fs.IntVar(&o.encPID, "enc-pid", 0, "encoder service pid (triage encode serve): its CPU over the measured window, and peak RSS")
	fs.StringVar(&o.encURL, "enc-metrics", "", "encoder service's /metrics URL (loopback): the texts it encoded and shed over the measured window")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.StringVar(&o.extra, "escalated-reasons", "client_gone", "comma-separated X-Triage-Reason values that also count as escalated (besides tier 2 and tier2_*)")
	fs.StringVar(&o.out, "out", "", "append the JSON record to this file")
	fs.StringVar(&o.arm, "arm", "", "label for the record: which gateway binary")
	fs.StringVar(&o.config, "config", "", "label for the record: which gateway config (plain, natural, escalate-30, all-escalate)")
	fs.IntVar(&o.round, "round", 0, "round number for the record")
	fs.DurationVar(&o.budget, "budget", 0, "tier 2's budget in the config, recorded for the targets mixload table checks")
	fs.BoolVar(&o.brief, "brief", false, "print a one-line summary instead of the report")
	fs.BoolVar(&o.jsonOnly, "json", false, "print the JSON record instead of the report")
	fs.Float64Var(&o.rate, "rate", 0, "open loop: start this many requests a second, evenly spaced, whatever the answers (each timed from when it was due, so a gateway that falls behind is charged for the wait); -c workers send them. 0: closed loop, each worker sends its next request when its last answer ends")
	fs.IntVar(&o.maxSample, "max-samples", 4_000_000, "stop a run after this many responses (memory bound: every latency is kept)")
	fs.Parse(args)
	if o.bodies == "" {
		return errors.New("run: -bodies is required (mixload gen writes a body set)")
	}
	if o.conc < 1 || o.dur <= 0 {
		return errors.New("run: -c must be at least 1 and -d positive")
	}
	if err := checkLoopback(o.url); err != nil {
		return err
	}
	bodies, err := readBodies(o.bodies)
	if err != nil {
		return err
	}
	hdrs := http.Header{}
	hdrs.Set("Content-Type", "application/json")
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return fmt.Errorf("run: bad header %q (want 'Name: value')", h)
		}
		hdrs.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	cl := newClassifier(o.extra)
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        o.conc * 2,
		MaxIdleConnsPerHost: o.conc * 2,
		MaxConnsPerHost:     o.conc,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.timeout}
	l := &loader{client: client, url: o.url, hdrs: hdrs, bodies: bodies, cl: cl, max: int64(o.maxSample), rate: o.rate}
	if o.warmup > 0 {
		l.run(o.conc, o.warmup)
	}
	watch := startWatch(o.gwPID, 200*time.Millisecond)
	encWatch := startWatch(o.encPID, 200*time.Millisecond)
	enc0, encErr := encoderCounts(o.encURL)
	if encErr != nil {
		return encErr
	}
	cpu0 := selfCPU()
	start := time.Now()
	res, elapsed := l.run(o.conc, o.dur)
	rec := res.record(elapsed)
	rec.Arm, rec.Config, rec.Round, rec.Conc, rec.Rate = o.arm, o.config, o.round, o.conc, o.rate
	rec.URL, rec.StartUnix = o.url, start.Unix()
	rec.Bodies, rec.DistinctBodies = len(bodies), distinct(bodies)
	rec.BudgetMS = float64(o.budget) / 1e6
	rec.DriverCPUSec = round3(selfCPU() - cpu0)
	if watch != nil {
		rec.GwRSSBeforeKB, rec.GwRSSMaxKB, rec.GwCPUSec = watch.finish()
		if rec.OK > 0 {
			rec.GwCPUUsPerReq = round2(rec.GwCPUSec * 1e6 / float64(rec.OK))
		}
	}
	if encWatch != nil {
		_, rec.EncRSSMaxKB, rec.EncCPUSec = encWatch.finish()
	}
	if o.encURL != "" {
		enc1, err := encoderCounts(o.encURL)
		if err != nil {
			return err
		}
		rec.EncTexts, rec.EncShed = enc1.ok-enc0.ok, enc1.shed-enc0.shed
		rec.EncTextsPerSec = round2(float64(rec.EncTexts) / elapsed.Seconds())
		if rec.EncCPUSec > 0 {
			rec.EncTextsPerCoreSec = round2(float64(rec.EncTexts) / rec.EncCPUSec)
		}
	}
	if o.out != "" {
		if err := appendRecord(o.out, rec); err != nil {
			return err
		}
	}
	switch {
	case o.jsonOnly:
		b, _ := json.Marshal(rec)
		fmt.Fprintln(stdout, string(b))
	case o.brief:
		fmt.Fprintln(stdout, rec.brief())
	default:
		rec.report(stdout)
	}
	return nil
}

// readBodies reads a JSONL file (one body a line; blank lines skipped) or
// every *.json file of a directory, in name order. Each must be JSON.
func readBodies(path string) ([][]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	if st.IsDir() {
		names, err := filepath.Glob(filepath.Join(path, "*.json"))
		if err != nil {
			return nil, err
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, err
			}
			b = bytes.TrimSpace(b)
			if !json.Valid(b) {
				return nil, fmt.Errorf("%s: not JSON", n)
			}
			out = append(out, b)
		}
	} else {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			if !json.Valid(line) {
				return nil, fmt.Errorf("%s:%d: not JSON", path, i+1)
			}
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no bodies", path)
	}
	return out, nil
}

func distinct(bodies [][]byte) int {
	seen := make(map[string]struct{}, len(bodies))
	for _, b := range bodies {
		seen[string(b)] = struct{}{}
	}
	return len(seen)
}

func checkLoopback(raw string) error {
	s := raw
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing non-loopback target %q", raw)
	}
	return nil
}

// classifier tells escalated answers from the rest by their headers.
type classifier struct{ extra map[string]bool }

func newClassifier(extra string) *classifier {
	c := &classifier{extra: map[string]bool{}}
	for _, r := range strings.Split(extra, ",") {
		if r = strings.TrimSpace(r); r != "" {
			c.extra[r] = true
		}
	}
	return c
}

// escalated: tier 2 decided, or was asked and did not answer in time, or
// could not (a reason beginning tier2_), or a reason the caller named.
func (c *classifier) escalated(tier, reason string) bool {
	return tier == "2" || strings.HasPrefix(reason, "tier2_") || c.extra[reason]
}

type loader struct {
	client *http.Client
	url    string
	hdrs   http.Header
	bodies [][]byte
	cl     *classifier
	max    int64
	cursor atomic.Uint64 // the next body, shared by the workers and kept from the warmup on
	rate   float64       // open loop when > 0
}

// part is one worker's share of a run.
type part struct {
	esc, plain []time.Duration // 2xx latencies, escalated or not
	reasons    map[string]int64
	tiers      map[string]int64
	routes     map[string]int64
	status     map[int]int64
	escAll     int64 // escalated answers, 2xx or not
	tier2OK    int64 // 2xx answers tier 2 decided (X-Triage-Tier: 2)
	non2xx     int64
	errs       int64
	errSample  string
}

func (p *part) fail(msg string) {
	p.errs++
	if p.errSample == "" {
		p.errSample = msg
	}
	time.Sleep(time.Millisecond) // a dead target must not spin the CPU
}

// run keeps conc requests in flight for d (the last ones end after it),
// and returns what they saw and how long the run took.
func (l *loader) run(conc int, d time.Duration) (*part, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	parts := make([]*part, conc)
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	// Open loop: a dispatcher hands the workers each request's due time,
	// evenly spaced; a request waiting for a free worker is late, and its
	// latency counts from when it was due.
	var due chan time.Time
	if l.rate > 0 {
		due = make(chan time.Time, 1<<16)
		gap := time.Duration(float64(time.Second) / l.rate)
		go func() {
			defer close(due)
			for i := 0; ; i++ {
				t := start.Add(time.Duration(i) * gap)
				if d := time.Until(t); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				if ctx.Err() != nil {
					return
				}
				select {
				case due <- t:
				default: // a backlog past 65,536 requests: the run is lost anyway
				}
			}
		}()
	}
	for w := range conc {
		p := &part{reasons: map[string]int64{}, tiers: map[string]int64{}, routes: map[string]int64{}, status: map[int]int64{}}
		parts[w] = p
		wg.Go(func() {
			for ctx.Err() == nil && total.Load() < l.max {
				var t0 time.Time
				if due != nil {
					t, ok := <-due
					if !ok {
						return
					}
					t0 = t
				}
				body := l.bodies[(l.cursor.Add(1)-1)%uint64(len(l.bodies))]
				req, _ := http.NewRequest(http.MethodPost, l.url, bytes.NewReader(body))
				req.Header = l.hdrs.Clone()
				req.ContentLength = int64(len(body))
				if due == nil {
					t0 = time.Now()
				}
				resp, err := l.client.Do(req)
				if err != nil {
					p.fail(err.Error())
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat := time.Since(t0)
				if err != nil {
					p.fail(err.Error())
					continue
				}
				tier, reason := resp.Header.Get("X-Triage-Tier"), resp.Header.Get("X-Triage-Reason")
				p.status[resp.StatusCode]++
				p.tiers[orNone(tier)]++
				p.reasons[orNone(reason)]++
				p.routes[orNone(resp.Header.Get("X-Triage-Route"))]++
				total.Add(1)
				esc := l.cl.escalated(tier, reason)
				if esc {
					p.escAll++
				}
				if resp.StatusCode < 200 || resp.StatusCode > 299 {
					p.non2xx++
					if p.errSample == "" {
						p.errSample = fmt.Sprintf("status %d", resp.StatusCode)
					}
					continue
				}
				if tier == "2" {
					p.tier2OK++
				}
				if esc {
					p.esc = append(p.esc, lat)
				} else {
					p.plain = append(p.plain, lat)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := &part{reasons: map[string]int64{}, tiers: map[string]int64{}, routes: map[string]int64{}, status: map[int]int64{}}
	for _, p := range parts {
		all.esc = append(all.esc, p.esc...)
		all.plain = append(all.plain, p.plain...)
		for k, v := range p.reasons {
			all.reasons[k] += v
		}
		for k, v := range p.tiers {
			all.tiers[k] += v
		}
		for k, v := range p.routes {
			all.routes[k] += v
		}
		for k, v := range p.status {
			all.status[k] += v
		}
		all.escAll += p.escAll
		all.tier2OK += p.tier2OK
		all.non2xx += p.non2xx
		all.errs += p.errs
		if all.errSample == "" {
			all.errSample = p.errSample
		}
	}
	return all, elapsed
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
