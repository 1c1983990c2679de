//go:build unix

package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
	"unsafe"
)

// prober asks the kernel, without blocking and without consuming
// anything, whether an idle upstream connection has bytes to read or has
// been closed by the replica: one recv(MSG_PEEK|MSG_DONTWAIT) per reuse.
// It is what net/http's client learns from the read it keeps pending on
// every idle connection, without a goroutine per connection.
type prober struct {
	raw syscall.RawConn
	tls bool
	fn  func(fd uintptr) // made once, so a probe allocates nothing
	n   int
	err error
	b   [1]byte
}

func (p *prober) init(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		p.tls, nc = true, tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.raw = raw
	p.fn = func(fd uintptr) {
		// MSG_DONTWAIT: the call never blocks, so it is made raw, without
		// telling the scheduler this thread may stall (syscall.Recvfrom
		// would, at the cost of handing its P off and taking it back).
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		p.n, p.err = int(r), nil
		if e != 0 {
			p.n, p.err = 0, e
		}
	}
}

// quiet reports that nothing is waiting on the socket and the replica has
// not closed it.
func (p *prober) quiet() bool {
	if p.raw == nil {
		return true
	}
	if err := p.raw.Control(p.fn); err != nil {
		return false
	}
	return p.err == syscall.EAGAIN || p.err == syscall.EWOULDBLOCK
}
