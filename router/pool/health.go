package pool

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Checker runs one active health check against a replica.
type Checker interface {
	Check(ctx context.Context, b *Backend, path string) error
}

// HTTPChecker checks with GET base+path and wants 200.
type HTTPChecker struct{ Client *http.Client }

// NewHTTPChecker returns a checker on its own client, apart from the
// request path's connections.
func NewHTTPChecker() *HTTPChecker {
	return &HTTPChecker{Client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}}}
}

// CloseIdleConnections closes the checker's kept-alive connections; a
// pool's Run calls it when it stops, so a pool retired by a reload leaves
// no connection (and no net/http goroutines) behind.
func (c *HTTPChecker) CloseIdleConnections() { c.Client.CloseIdleConnections() }

// Check implements Checker. A replica with its own TLS settings
// (Backend.TLS) is checked over a client of its own that uses them.
func (c *HTTPChecker) Check(ctx context.Context, b *Backend, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.Scheme+"://"+b.Host+b.BasePath+path, nil)
	if err != nil {
		return err
	}
	client := c.Client
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
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Code: resp.StatusCode}
	}
	return nil
}

// StatusError is a health check answered with a status other than 200.
type StatusError struct{ Code int }

func (e *StatusError) Error() string { return "health check answered " + http.StatusText(e.Code) }

// Transition is a change of a backend's active-health verdict.
type Transition struct {
	Pool, Backend string
	Healthy       bool
	Err           error // the failing check's error when !Healthy
	// Metrics: the change is of the replica's /metrics scrape, not its
	// health: !Healthy when a scrape first fails (reported once, not per
	// scrape), Healthy when one succeeds again.
	Metrics bool
}

// Run checks every replica at once and then each Interval (with up to 10%
// jitter so replicas are not probed in lockstep), calling onChange (which
// may be nil) on every change of verdict; when the pool scrapes its
// replicas' /metrics, it does so too (runScrapes). It returns when ctx is
// done and all checks and scrapes have stopped. With checks and scrapes
// disabled it returns at once.
func (p *Pool) Run(ctx context.Context, onChange func(Transition)) {
	var wg sync.WaitGroup
	if p.scrapes {
		wg.Go(func() { p.runScrapes(ctx, onChange) })
	}
	if !*p.cfg.Health.Enabled {
		wg.Wait()
		return
	}
	for _, b := range p.backends {
		wg.Go(func() { every(ctx, p.cfg.Health.Interval, func() { p.CheckOnce(ctx, b, onChange) }) })
	}
	wg.Wait()
	if c, ok := p.checker.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	for _, b := range p.backends {
		if b.checkClient != nil {
			b.checkClient.CloseIdleConnections()
		}
	}
}

// CheckOnce runs one check of b and applies the thresholds: the first
// verdict is taken at once; after that HealthyThreshold passes in a row
// bring a replica up and UnhealthyThreshold failures take it down. Only one
// goroutine may check a given backend at a time.
func (p *Pool) CheckOnce(ctx context.Context, b *Backend, onChange func(Transition)) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Health.Timeout)
	err := p.checker.Check(cctx, b, p.cfg.Health.Path)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: a cancelled check says nothing
	}
	prev := b.health.Load()
	next := prev
	if err == nil {
		b.checkPasses++
		b.checkFails = 0
		if prev != healthUp && (prev == healthUnknown || b.checkPasses >= p.cfg.Health.HealthyThreshold) {
			next = healthUp
		}
	} else {
		b.checkFails++
		b.checkPasses = 0
		if prev != healthDown && (prev == healthUnknown || b.checkFails >= p.cfg.Health.UnhealthyThreshold) {
			next = healthDown
		}
	}
	if next != prev {
		b.health.Store(next)
		if onChange != nil {
			onChange(Transition{Pool: p.cfg.Name, Backend: b.Name, Healthy: next == healthUp, Err: err})
		}
	}
}

// every runs fn, then again each interval with up to 10% jitter (so a
// pool's replicas are not all asked at once), until ctx is done.
func every(ctx context.Context, interval time.Duration, fn func()) {
	for {
		fn()
		jitter := time.Duration(rand.Int64N(int64(interval)/10 + 1))
		t := time.NewTimer(interval + jitter)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
