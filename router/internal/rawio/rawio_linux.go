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
	rc syscall.RawConn
	// made once, so that a call allocates nothing
	readFn, writeFn func(fd uintptr) bool
	// The call in flight in each direction: its buffer, count and error.
	// A net.Conn may be read (or written) from two goroutines at once,
	// so each direction's fields have a lock.
	rmu, wmu   sync.Mutex
	rb, wb     []byte
	rn, wn     int
	rerr, werr syscall.Errno
}

// Wrap returns tc with raw reads and writes, or tc itself when its file
// descriptor cannot be reached, or in a build with the race detector:
// syscall's Read and Write tell the detector that what one goroutine
// wrote to a socket happens before another reads it, and raw calls would
// not, so it would report races between goroutines that a connection
// orders (a test's client and the server it calls).
func Wrap(tc *net.TCPConn) net.Conn {
	if raceEnabled {
		return tc
	}
	return wrap(tc)
}

func wrap(tc *net.TCPConn) net.Conn {
	rc, err := tc.SyscallConn()
	if err != nil {
		return tc
	}
	c := &Conn{TCPConn: tc, rc: rc}
	c.readFn = c.read
	c.writeFn = c.write
	return c
}

// read is called by the poller with the socket's descriptor: false asks
// it to wait for readiness (or the deadline) and call again.
func (c *Conn) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.rb))), uintptr(len(c.rb)))
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

func (c *Conn) write(fd uintptr) bool {
	for len(c.wb) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.wb))), uintptr(len(c.wb)))
		switch e {
		case 0:
			c.wn += int(n)
			c.wb = c.wb[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = e
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
	c.rmu.Lock()
	c.rb, c.rn, c.rerr = b, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	c.rb = nil
	c.rmu.Unlock()
	if err == nil && errno != 0 {
		err = errno
	}
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
	c.wmu.Lock()
	c.wb, c.wn, c.werr = b, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wb = nil
	c.wmu.Unlock()
	if err == nil && errno != 0 {
		err = errno
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
