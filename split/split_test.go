package split

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockedBuffer is a Log's destination read while Run writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Split(strings.TrimSuffix(w.b.String(), "\n"), "\n")
}

func TestLogQueuesDropsAndWritesWholeLines(t *testing.T) {
	var dropped atomic.Int64
	l := NewLog(2, func() { dropped.Add(1) })
	var out lockedBuffer
	for _, id := range []string{"r1", "r2", "r3"} {
		l.Offer(&out, &Record{Arm: "a", RequestID: id, Status: 200})
	}
	if dropped.Load() != 1 {
		t.Fatalf("a full queue of 2 dropped %d of 3 lines, want 1", dropped.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	// The records are reused once written: later lines must not change
	// earlier ones.
	waitLines(t, &out, 2)
	l.Offer(&out, &Record{Arm: "b", RequestID: "r4", Status: 503})
	waitLines(t, &out, 3)
	cancel()
	<-done
	var got []string
	for _, line := range out.lines() {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, r.Arm+"/"+r.RequestID)
	}
	if strings.Join(got, " ") != "a/r1 a/r2 b/r4" {
		t.Fatalf("lines %v", got)
	}
}

func waitLines(t *testing.T, out *lockedBuffer, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if len(out.lines()) >= n && out.lines()[0] != "" {
			return
		}
	}
	t.Fatalf("want %d lines, have %q", n, out.lines())
}
