//go:build !linux

package rawio

import "net"

// Wrap returns nc: raw reads and writes are made on Linux only.
func Wrap(nc net.Conn) net.Conn { return nc }

func wrap(tc *net.TCPConn) net.Conn { return tc }
