package testenv

import (
	"strings"
	"testing"
	"time"
)

func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	var got int
	if r := record(func(tb testing.TB) { got = Receive(tb, ch, "seven") }); r.failed != "" || got != 7 {
		t.Fatalf("Receive with a value waiting = %d, failed %q", got, r.failed)
	}
	r := record(func(tb testing.TB) { ReceiveWithin(tb, 10*time.Millisecond, ch, "an event that never comes") })
	if !strings.Contains(r.failed, "an event that never comes") {
		t.Fatalf("ReceiveWithin on a silent channel: failed %q", r.failed)
	}
}

func TestWait(t *testing.T) {
	calls := 0
	if r := record(func(tb testing.TB) { Wait(tb, func() bool { calls++; return calls == 5 }, "five calls") }); r.failed != "" || calls != 5 {
		t.Fatalf("Wait: %d calls, failed %q", calls, r.failed)
	}
	start := time.Now()
	r := record(func(tb testing.TB) {
		WaitWithin(tb, 30*time.Millisecond, "a state never reached", func() (bool, string) { return false, "still 3" })
	})
	if !strings.Contains(r.failed, "a state never reached") || !strings.Contains(r.failed, "last: still 3") {
		t.Fatalf("WaitWithin past its timeout: failed %q", r.failed)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("WaitWithin gave up after %v, before its 30ms", took)
	}
	if last, ok := Poll(time.Millisecond, func() (bool, string) { return false, "no" }); ok || last != "no" {
		t.Fatalf("Poll of a false cond = %q, %v", last, ok)
	}
}
