package sample

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/rules"
)

func TestTakeCapsPerHour(t *testing.T) {
	s := New(0)
	o := &Options{Rate: 1, PerHour: 3}
	at := time.Date(2026, 5, 1, 10, 59, 0, 0, time.UTC)
	var got []bool
	for range 5 {
		got = append(got, s.Take(o, at))
	}
	if want := []bool{true, true, true, false, false}; !equal(got, want) {
		t.Fatalf("Take in one hour = %v, want %v", got, want)
	}
	if c := s.Counts(); c.Capped != 2 || c.Taken != 3 {
		t.Errorf("counts %+v, want 3 taken, 2 capped", c)
	}
	if !s.Take(o, at.Add(time.Minute)) {
		t.Error("Take in the next hour = false: the cap is per hour")
	}
}

func TestTakeRate(t *testing.T) {
	s := New(0)
	const n = 20000
	for _, rate := range []float64{0.01, 0.2} {
		o := &Options{Rate: rate}
		taken := 0
		for range n {
			if s.Take(o, time.Now()) {
				taken++
			}
		}
		// Binomial: 5 standard deviations either side.
		mean := rate * n
		sd := 5 * math.Sqrt(mean*(1-rate))
		if float64(taken) < mean-sd || float64(taken) > mean+sd {
			t.Errorf("rate %v: took %d of %d, want %.0f ± %.0f", rate, taken, n, mean, sd)
		}
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOfferNeverBlocks: with the worker stuck (not running), a full queue
// drops and counts, and Offer returns.
func TestOfferNeverBlocks(t *testing.T) {
	s := New(2)
	o := &Options{Rate: 1}
	for range 5 {
		s.Offer(Record{Time: time.Now()}, "text", nil, nil, o)
	}
	if d := s.Counts().Dropped; d != 3 {
		t.Errorf("dropped = %d, want 3 (queue of 2, 5 offered)", d)
	}
}

type lines struct {
	mu sync.Mutex
	b  strings.Builder
	n  chan struct{}
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.n <- struct{}{}
	return len(p), nil
}

// TestRecordRedacted: the worker writes the record redacted, without the
// principal unless asked, and with the time to the hour then.
func TestRecordRedacted(t *testing.T) {
	s := New(0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	out := &lines{n: make(chan struct{}, 2)}
	at := time.Date(2026, 5, 1, 10, 42, 17, 123, time.UTC)
	dec := rules.Decision{Pool: "legal", Route: "legal", Class: "law", Score: 0.91, Tier: 1, Reason: rules.ReasonTier1Confident}
	text := "my landlord jane@example.com kept my deposit, call +1 (555) 123-4567"
	s.Offer(Record{Time: at, Decision: dec, Principal: "team-legal"}, text, nil, out, &Options{Rate: 1})
	s.Offer(Record{Time: at, Decision: dec, Principal: "team-legal"}, text, nil, out, &Options{Rate: 1, Principal: true})
	<-out.n
	<-out.n
	out.mu.Lock()
	got := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	out.mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i, want := range []struct {
		principal string
		at        time.Time
	}{{"", at.Truncate(time.Hour)}, {"team-legal", at.Truncate(time.Second)}} {
		if strings.Contains(got[i], "jane") || strings.Contains(got[i], "4567") {
			t.Errorf("line %d holds what Redact removes: %s", i, got[i])
		}
		var r Record
		if err := json.Unmarshal([]byte(got[i]), &r); err != nil {
			t.Fatal(err)
		}
		if r.Text != "my landlord [email] kept my deposit, call [phone]" {
			t.Errorf("line %d: text %q", i, r.Text)
		}
		if r.Principal != want.principal || !r.Time.Equal(want.at) {
			t.Errorf("line %d: principal %q time %v, want %q %v", i, r.Principal, r.Time, want.principal, want.at)
		}
		if r.Decision != dec {
			t.Errorf("line %d: decision %+v, want %+v", i, r.Decision, dec)
		}
	}
	// A record is counted after its line is written: stop the writer
	// before reading the count.
	cancel()
	<-done
	if w := s.Counts().Written; w != 2 {
		t.Errorf("written = %d, want 2", w)
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("é", MaxText) // 2 bytes each
	got, cut := Clip(long)
	if !cut || len(got) > MaxText || !strings.HasPrefix(long, got) || len(got) < MaxText-1 {
		t.Errorf("Clip(%d bytes) = %d bytes, cut %v", len(long), len(got), cut)
	}
	if got, cut := Clip("short"); got != "short" || cut {
		t.Errorf("Clip(short) = %q, %v", got, cut)
	}
}
