package rawio

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// pair returns a wrapped client connection and the server's end of it.
func pair(t *testing.T) (net.Conn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	w := wrap(c.(*net.TCPConn)) // raw even under the race detector, which Wrap is not
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s.(*net.TCPConn)
}

func TestWrapIsRawOnLinux(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, plain := Wrap(c).(*net.TCPConn)
	raw := !plain
	switch {
	case raceEnabled && raw:
		t.Fatal("Wrap made a raw connection under the race detector")
	case !raceEnabled && !raw && runtime.GOOS == "linux":
		t.Fatal("Wrap did not make a raw connection on Linux")
	}
}

// What a wrapped connection reads and writes, and how it fails, is what
// the TCPConn itself would give: the callers test errors with errors.Is
// and net.Error's Timeout.
func TestReadWriteAsTCPConn(t *testing.T) {
	w, s := pair(t)

	// A write a hundred times the sockets' buffers: it fills them, waits
	// for room and resumes where it stopped, again and again, however
	// fast the peer reads.
	if err := w.(interface{ SetWriteBuffer(int) error }).SetWriteBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	if err := s.SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8<<20)
	rand.Read(big)
	got := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for b.Len() < len(big) {
			n, err := s.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.Bytes()
	}()
	if n, err := w.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the peer read %d bytes, not what was written", len(b))
	}

	// Reads: what arrived, then io.EOF at the peer's end.
	if _, err := s.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if n, err := io.ReadAtLeast(w, b, 5); n != 5 || err != nil || string(b[:5]) != "hello" {
		t.Fatalf("Read = %q, %v", b[:n], err)
	}
	if n, err := w.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	s.CloseWrite()
	if n, err := w.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("Read at the peer's end = %d, %v; want io.EOF", n, err)
	}
}

func TestDeadlineAndClose(t *testing.T) {
	w, _ := pair(t)
	w.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	_, err := w.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v; want a timeout", err)
	}
	if time.Since(start) < 15*time.Millisecond {
		t.Fatalf("the read gave up after %v, before its deadline", time.Since(start))
	}
	w.SetReadDeadline(time.Time{})

	// Close while a read waits: the read ends with net.ErrClosed.
	done := make(chan error, 1)
	go func() {
		_, err := w.Read(make([]byte, 8))
		done <- err
	}()
	testenv.Wait(t, readWaiting, "the Read to wait in the poller")
	w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read on a closed connection = %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Read")
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
}

func TestReset(t *testing.T) {
	w, s := pair(t)
	s.SetLinger(0) // close sends RST
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(w, b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var err error
	for range 100 {
		if _, err = w.Read(b); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the peer's reset = %v; want ECONNRESET", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("error %T %v is not a read *net.OpError", err, err)
	}
}

// net.Conn may be used from several goroutines at once: two readers and
// two writers on one connection (run it with -race).
func TestConcurrentUse(t *testing.T) {
	w, s := pair(t)
	const n = 2000
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if _, err := w.Write([]byte("ab")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	echoed := make(chan int, 2)
	for range 2 {
		go func() {
			total := 0
			b := make([]byte, 64)
			for {
				k, err := w.Read(b)
				total += k
				if err != nil {
					echoed <- total
					return
				}
			}
		}()
	}
	// The peer echoes what it reads, then ends its side.
	go func() {
		io.CopyN(s, s, 4*n)
		s.CloseWrite()
	}()
	wg.Wait()
	if got := <-echoed + <-echoed; got != 4*n {
		t.Fatalf("read %d bytes back, want %d", got, 4*n)
	}
}

// A wrapped connection keeps the TCPConn's writev: net.Buffers reach the
// peer whole and in order.
func TestBuffers(t *testing.T) {
	w, s := pair(t)
	bufs := net.Buffers{[]byte("head "), bytes.Repeat([]byte("x"), 100<<10), []byte(" tail")}
	want := bytes.Join(bufs, nil)
	go func() {
		bufs.WriteTo(w)
		w.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("peer read %d bytes (%v), want %d", len(got), err, len(want))
	}
}

// readWaiting reports whether a goroutine of this test waits in the
// network poller inside a connection's Read: a goroutine's state is in
// the dump of all stacks ("goroutine 7 [IO wait]:"), its calls below it.
func readWaiting() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, ").Read(") && strings.Contains(g, "rawio.TestDeadlineAndClose") {
			return true
		}
	}
	return false
}
