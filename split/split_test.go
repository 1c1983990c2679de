package split

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/triagegw/triage/internal/testenv"
)

// lines is what out holds, as lines.
func lines(out *testenv.Buffer) []string {
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

func TestLogQueuesDropsAndWritesWholeLines(t *testing.T) {
	var dropped atomic.Int64
	l := NewLog(2, func() { dropped.Add(1) })
	var out testenv.Buffer
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
	for _, line := range lines(&out) {
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

func waitLines(t *testing.T, out *testenv.Buffer, n int) {
	t.Helper()
	testenv.WaitWithin(t, testenv.WaitTimeout, fmt.Sprintf("%d lines", n), func() (bool, string) {
		l := lines(out)
		return len(l) >= n && l[0] != "", fmt.Sprintf("%q", l)
	})
}
