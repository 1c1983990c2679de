//go:build !linux

package rawio

import "net"

// Wrap returns tc: raw reads and writes are made on Linux only.
func Wrap(tc *net.TCPConn) net.Conn { return tc }

func wrap(tc *net.TCPConn) net.Conn { return tc }
