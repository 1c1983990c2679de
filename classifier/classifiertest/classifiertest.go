// Package classifiertest holds classifier test doubles.
package classifiertest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/classifier"
)

// Fixed answers from a table: the first rule whose Contains is in the text
// gives the result; otherwise Default. It records the texts it saw.
type Fixed struct {
	Rules   []Rule
	Default classifier.Scored
	// Delay, if set, is waited (or ctx's end, whichever comes first).
	Delay time.Duration
	// Err, if set, is returned instead of a result.
	Err error

	Calls atomic.Int64
	mu    sync.Mutex
	last  string
}

// Rule maps a substring to a verdict.
type Rule struct {
	Contains string
	Class    string
	Score    float32
	// Delay, if set, is waited before this rule's verdict (or ctx's end),
	// instead of Fixed.Delay.
	Delay time.Duration
}

// Classify implements classifier.Classifier.
func (f *Fixed) Classify(ctx context.Context, text string, r *classifier.Result) error {
	f.Calls.Add(1)
	f.mu.Lock()
	f.last = strings.Clone(text) // text is only lent for the call
	f.mu.Unlock()
	v, delay := f.Default, f.Delay
	for _, rule := range f.Rules {
		if strings.Contains(text, rule.Contains) {
			v = classifier.Scored{Class: rule.Class, Score: rule.Score}
			if rule.Delay > 0 {
				delay = rule.Delay
			}
			break
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if f.Err != nil {
		return f.Err
	}
	r.Class, r.Score, r.Top = v.Class, v.Score, append(r.Top[:0], v)
	return nil
}

// Last is the last text classified.
func (f *Fixed) Last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Dist answers with a whole probability distribution over Classes (what
// the real tiers give, in Result.Probs): the first rule whose Contains is
// in the text, else Default. Probabilities not given are 0; they need not
// sum to 1.
type Dist struct {
	Classes []string
	Rules   []DistRule
	Default map[string]float32
}

// DistRule maps a substring to a distribution, and the distance from
// its top class's centroid tier 1 would report (Result.Distance).
type DistRule struct {
	Contains string
	Probs    map[string]float32
	Distance float32
}

// Classify implements classifier.Classifier.
func (d *Dist) Classify(_ context.Context, text string, r *classifier.Result) error {
	m, dist := d.Default, float32(0)
	for _, rule := range d.Rules {
		if strings.Contains(text, rule.Contains) {
			m, dist = rule.Probs, rule.Distance
			break
		}
	}
	probs := make([]float32, len(d.Classes))
	for i, c := range d.Classes {
		probs[i] = m[c]
	}
	r.SetTop(d.Classes, probs, 3)
	r.SetProbs(probs)
	r.Distance = dist
	return nil
}
