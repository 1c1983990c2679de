package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Scraped is a replica's state as its /metrics last reported it, summed
// over its series (engines, models).
type Scraped struct {
	Running, Waiting float64 // vllm:num_requests_running, vllm:num_requests_waiting
	// KVUsage is the fraction of KV-cache blocks in use (0..1):
	// vllm:kv_cache_usage_perc, or vllm:gpu_cache_usage_perc before vLLM
	// 0.10; NaN when the replica reports neither.
	KVUsage float64
	// PrefixQueries and PrefixHits are prefix-cache counters, in tokens
	// (vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total);
	// NaN when not reported.
	PrefixQueries, PrefixHits float64
	At                        time.Time // when the scrape ended
}

// Scraper reads one replica's metrics.
type Scraper interface {
	Scrape(ctx context.Context, b *Backend, path string, maxBytes int64) (Scraped, error)
}

// HTTPScraper scrapes with GET base+path.
type HTTPScraper struct{ Client *http.Client }

// NewHTTPScraper returns a scraper on its own client, apart from the
// request path's connections.
func NewHTTPScraper() *HTTPScraper {
	return &HTTPScraper{Client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}}}
}

// CloseIdleConnections closes the scraper's kept-alive connections.
func (s *HTTPScraper) CloseIdleConnections() { s.Client.CloseIdleConnections() }

// Scrape implements Scraper: a 200 answer in Prometheus' text format of
// at most maxBytes that reports vllm:num_requests_running and
// vllm:num_requests_waiting.
func (s *HTTPScraper) Scrape(ctx context.Context, b *Backend, path string, maxBytes int64) (Scraped, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.Scheme+"://"+b.Host+b.BasePath+path, nil)
	if err != nil {
		return Scraped{}, err
	}
	client := s.Client
	if b.TLS != nil {
		b.checkOnce.Do(func() {
			b.checkClient = &http.Client{Transport: &http.Transport{
				TLSClientConfig:     b.TLS,
				MaxIdleConnsPerHost: 2,
				IdleConnTimeout:     90 * time.Second,
			}}
		})
		client = b.checkClient
	}
	if b.APIKey != "" && !b.Anthropic {
		req.Header.Set("Authorization", "Bearer "+b.APIKey) // vLLM's --api-key guards /metrics too
	}
	resp, err := client.Do(req)
	if err != nil {
		return Scraped{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Scraped{}, fmt.Errorf("metrics answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return Scraped{}, err
	}
	if int64(len(body)) > maxBytes {
		return Scraped{}, fmt.Errorf("metrics body exceeds metrics.max_bytes (%d)", maxBytes)
	}
	return ParseMetrics(body)
}

// ParseMetrics reads vLLM's figures from a Prometheus text exposition:
// samples of the names Scraped documents, summed over their labels.
// Comments and other metrics are skipped. It fails when a sample of those
// names has a value that is not a number, or when the running or waiting
// count is missing (not a vLLM replica, or not its metrics).
func ParseMetrics(body []byte) (Scraped, error) {
	sc := Scraped{KVUsage: math.NaN(), PrefixQueries: math.NaN(), PrefixHits: math.NaN()}
	var haveRun, haveWait bool
	var kvNew, kvOld float64
	var haveKVNew, haveKVOld bool
	add := func(dst *float64, v float64) {
		if math.IsNaN(*dst) {
			*dst = 0
		}
		*dst += v
	}
	for line, n := body, 1; len(line) > 0; n++ {
		var cur []byte
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			cur, line = line[:i], line[i+1:]
		} else {
			cur, line = line, nil
		}
		cur = bytes.TrimSpace(cur)
		if len(cur) == 0 || cur[0] == '#' || !bytes.HasPrefix(cur, []byte("vllm:")) {
			continue
		}
		end := bytes.IndexAny(cur, "{ \t")
		if end < 0 {
			return sc, fmt.Errorf("metrics line %d: a name without a value", n)
		}
		name := string(cur[:end]) // no allocation: compared, not kept
		rest := cur[end:]
		if rest[0] == '{' {
			close := bytes.LastIndexByte(rest, '}')
			if close < 0 {
				return sc, fmt.Errorf("metrics line %d: unterminated labels", n)
			}
			rest = rest[close+1:]
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			return sc, fmt.Errorf("metrics line %d: a sample without a value", n)
		}
		var dst *float64
		switch name {
		case "vllm:num_requests_running":
			dst, haveRun = &sc.Running, true
		case "vllm:num_requests_waiting":
			dst, haveWait = &sc.Waiting, true
		case "vllm:kv_cache_usage_perc":
			dst, haveKVNew = &kvNew, true
		case "vllm:gpu_cache_usage_perc":
			dst, haveKVOld = &kvOld, true
		case "vllm:prefix_cache_queries_total":
			dst = &sc.PrefixQueries
		case "vllm:prefix_cache_hits_total":
			dst = &sc.PrefixHits
		default:
			continue
		}
		v, err := strconv.ParseFloat(string(fields[0]), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return sc, fmt.Errorf("metrics line %d: %s has value %q, want a non-negative number", n, name, fields[0])
		}
		add(dst, v)
	}
	switch {
	case !haveRun:
		return sc, errors.New("metrics report no vllm:num_requests_running (not a vLLM replica?)")
	case !haveWait:
		return sc, errors.New("metrics report no vllm:num_requests_waiting (not a vLLM replica?)")
	case haveKVNew:
		sc.KVUsage = kvNew
	case haveKVOld:
		sc.KVUsage = kvOld
	}
	return sc, nil
}

// Scraped is b's state as its /metrics last reported it, and whether a
// scrape has succeeded since the pool was built.
func (b *Backend) Scraped() (Scraped, bool) {
	if s := b.scraped.Load(); s != nil {
		return *s, true
	}
	return Scraped{}, false
}

// ScrapeFresh reports whether b's scraped state is recent enough to
// weigh its load by (three intervals).
func (b *Backend) ScrapeFresh(now time.Time) bool {
	until := b.queueUntil.Load()
	return until != 0 && now.UnixNano() < until
}

// runScrapes scrapes every replica each metrics.interval, with up to 10%
// jitter, until ctx is done. A replica whose scrape fails is reported
// once, through onChange (Transition.Metrics), and again only when it has
// been read and then fails anew; its load falls back to the in-flight
// count once its last figures are stale.
func (p *Pool) runScrapes(ctx context.Context, onChange func(Transition)) {
	var wg sync.WaitGroup
	for _, b := range p.backends {
		wg.Go(func() { every(ctx, p.cfg.Metrics.Interval, func() { p.ScrapeOnce(ctx, b, onChange) }) })
	}
	wg.Wait()
	if c, ok := p.scraper.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// ScrapeOnce scrapes b once and records what it reports. Only one
// goroutine may scrape a given backend at a time.
func (p *Pool) ScrapeOnce(ctx context.Context, b *Backend, onChange func(Transition)) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Metrics.Timeout)
	base := b.inflight.Load()
	sc, err := p.scraper.Scrape(cctx, b, p.cfg.Metrics.Path, p.cfg.Metrics.MaxBytes)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		if b.scrapeErr == "" && onChange != nil {
			onChange(Transition{Pool: p.cfg.Name, Backend: b.Name, Metrics: true, Err: err})
		}
		b.scrapeErr = err.Error()
		return
	}
	now := p.now()
	sc.At = now
	b.scraped.Store(&sc)
	b.queue.Store(int64(sc.Running + sc.Waiting))
	b.queueBase.Store(base)
	b.queueUntil.Store(now.Add(3 * p.cfg.Metrics.Interval).UnixNano())
	if b.scrapeErr != "" {
		b.scrapeErr = ""
		if onChange != nil {
			onChange(Transition{Pool: p.cfg.Name, Backend: b.Name, Metrics: true, Healthy: true})
		}
	}
}
