package testenv

import (
	"testing"
	"time"
)

// WaitTimeout is how long Wait and Receive wait unless told otherwise:
// far longer than anything they wait for takes on a loaded machine, so
// reaching it means the thing will not happen.
const WaitTimeout = 5 * time.Second

// Receive returns the next value on ch, failing tb if none comes within
// WaitTimeout. what names the event, for the failure.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	return ReceiveWithin(tb, WaitTimeout, ch, what)
}

// ReceiveWithin is Receive with its own timeout.
func ReceiveWithin[T any](tb testing.TB, timeout time.Duration, ch <-chan T, what string) T {
	tb.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		var zero T
		return zero
	}
}

// Wait polls cond until it reports true, failing tb if that takes longer
// than WaitTimeout. It is for what a test can only see by looking: the
// state of another process, a socket, a metric. Where the code can say
// when a thing happened (a hook, a channel), use Receive on that instead.
func Wait(tb testing.TB, cond func() bool, what string) {
	tb.Helper()
	WaitWithin(tb, WaitTimeout, what, func() (bool, string) { return cond(), "" })
}

// WaitWithin is Wait with its own timeout, for a cond that also says what
// it last saw: the failure reports it.
func WaitWithin(tb testing.TB, timeout time.Duration, what string, cond func() (ok bool, last string)) {
	tb.Helper()
	if last, ok := Poll(timeout, cond); !ok {
		if last != "" {
			last = "; last: " + last
		}
		tb.Fatalf("timed out after %v waiting for %s%s", timeout, what, last)
	}
}

// Poll calls cond until it reports true, at first every millisecond, then
// less often (up to every 25 ms), for at most timeout. It reports whether
// cond did, and what cond last said: for helpers that return an error
// rather than fail the test.
func Poll(timeout time.Duration, cond func() (ok bool, last string)) (last string, ok bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	every := time.Millisecond
	for {
		if ok, last = cond(); ok {
			return last, true
		}
		tick := time.NewTimer(every)
		select {
		case <-deadline.C:
			tick.Stop()
			ok, last = cond()
			return last, ok
		case <-tick.C:
		}
		every = min(2*every, 25*time.Millisecond)
	}
}
