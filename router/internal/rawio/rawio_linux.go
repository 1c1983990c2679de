//go:build linux

package rawio

import (
	"io"
	"net"
	"sync"
	"syscall"
	"unsafe"
)

// Conn is a *net.TCPConn whose Read and Write are raw system calls. Every
// other method, including the writev (net.Buffers), ReadFrom and
// CloseWrite paths, is the TCPConn's own.
type Conn struct {
	*net.TCPConn
	rc   syscall.RawConn
	r, w call
}

// call is one direction's system call in flight: the caller's buffer and
// what the call did with it. A net.Conn may be read (or written) from two
// goroutines at once, so each direction has a lock.
type call struct {
	mu  sync.Mutex
	b   []byte
	n   int
	err syscall.Errno
	fn  func(fd uintptr) bool // made once, so that a call allocates nothing
}

// run hands b to the poller's Read or Write, which calls c.fn with the
// descriptor until it reports done, and returns the count and the error:
// the poller's (a deadline, Close) or the system call's.
func (c *call) run(rc syscall.RawConn, write bool, b []byte) (int, error) {
	c.mu.Lock()
	c.b, c.n, c.err = b, 0, 0
	var err error
	if write {
		err = rc.Write(c.fn)
	} else {
		err = rc.Read(c.fn)
	}
	n, errno := c.n, c.err
	c.b = nil
	c.mu.Unlock()
	if err == nil && errno != 0 {
		err = errno
	}
	return n, err
}

// Wrap returns nc with raw reads and writes when it is a *net.TCPConn,
// and nc itself otherwise, when its file descriptor cannot be reached, or
// in a build with the race detector: syscall's Read and Write tell the
// detector that what one goroutine wrote to a socket happens before
// another reads it, and raw calls would not, so it would report races
// between goroutines that a connection orders (a test's client and the
// server it calls).
func Wrap(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok || raceEnabled {
		return nc
	}
	return wrap(tc)
}

func wrap(tc *net.TCPConn) net.Conn {
	rc, err := tc.SyscallConn()
	if err != nil {
		return tc
	}
	c := &Conn{TCPConn: tc, rc: rc}
	c.r.fn = c.read
	c.w.fn = c.write
	return c
}

// read is called by the poller with the socket's descriptor: false asks
// it to wait for readiness (or the deadline) and call again.
func (c *Conn) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.r.b))), uintptr(len(c.r.b)))
		switch e {
		case 0:
			c.r.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.r.err = e
		return true
	}
}

func (c *Conn) write(fd uintptr) bool {
	for len(c.w.b) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.w.b))), uintptr(len(c.w.b)))
		switch e {
		case 0:
			c.w.n += int(n)
			c.w.b = c.w.b[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.w.err = e
			return true
		}
	}
	return true
}

// Read reads as net.Conn's Read does: io.EOF at the peer's end, a
// *net.OpError otherwise (a timeout's Timeout() is true).
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := c.r.run(c.rc, false, b)
	if err != nil {
		return 0, c.opError("read", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b unless an error (or the deadline) stops it.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.w.run(c.rc, true, b)
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
