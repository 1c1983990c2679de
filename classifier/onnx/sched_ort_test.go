//go:build cgo && ort

package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
)

// TestScheduledUSE runs the scheduler on the real encoder: many callers
// with deadlines get the vectors that unscheduled Runs give (batched or
// not), and a text that cannot finish in time is refused without a Run.
func TestScheduledUSE(t *testing.T) {
	requireORT(t)
	dir := useDir(t)
	plain, err := Open(dir, modelsDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	m, err := Open(dir, modelsDir(), Options{Schedule: true, MaxConcurrent: 2, Nice: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	subjects := []string{"my landlord kept the deposit", "a TypeError in a list comprehension", "the derivative of x squared",
		"symptoms of the flu in children", "why did the Roman empire fall", "how do enzymes lower activation energy"}
	var texts []string
	for i := range 48 {
		texts = append(texts, fmt.Sprintf("%s, question %d: %s", subjects[i%len(subjects)], i, subjects[(i*5)%len(subjects)]))
	}
	want := make([][]float32, len(texts))
	for i, s := range texts {
		if want[i], err = plain.Features(context.Background(), s, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]float32, len(texts))
	errs := make([]error, len(texts))
	var wg sync.WaitGroup
	for i, s := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got[i], errs[i] = m.Features(ctx, s, nil)
		}()
	}
	wg.Wait()
	for i := range texts {
		if errs[i] != nil {
			t.Fatalf("%q: %v", texts[i], errs[i])
		}
		for k := range want[i] {
			if math.Abs(float64(got[i][k]-want[i][k])) > 1e-4 {
				t.Fatalf("%q: component %d is %v scheduled, %v alone", texts[i], k, got[i][k], want[i][k])
			}
		}
	}
	st, ok := m.RunStats()
	if !ok {
		t.Fatal("a scheduled model reports no stats")
	}
	_, _, runs, _ := st.Run.Snapshot()
	_, _, texted, sum := st.Batch.Snapshot()
	if texted != runs || int(sum) != len(texts) || st.Shed != 0 || st.Queued != 0 {
		t.Errorf("%d Runs, %d batches totalling %v texts, stats %+v; want every text in one Run, none shed", runs, texted, sum, st)
	}
	t.Logf("%d texts in %d Runs", len(texts), runs)

	// A deadline no Run can meet: refused at once, nothing runs.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
	defer cancel()
	if _, err := m.Features(ctx, texts[0], nil); !errors.Is(err, classifier.ErrShed) {
		t.Errorf("50 µs budget: %v, want ErrShed", err)
	}
	st, _ = m.RunStats()
	if _, _, n, _ := st.Run.Snapshot(); n != runs || st.Shed != 1 {
		t.Errorf("after a shed text: %d Runs (was %d), %d shed", n, runs, st.Shed)
	}

	// Offline work (no deadline) runs unscheduled, one Run a text.
	if v, err := m.Features(context.Background(), texts[1], nil); err != nil || math.Abs(float64(v[0]-want[1][0])) > 1e-6 {
		t.Errorf("without a deadline: %v", err)
	}
	if st, _ = m.RunStats(); func() uint64 { _, _, n, _ := st.Run.Snapshot(); return n }() != runs {
		t.Error("a text without a deadline went through the scheduler")
	}
}
