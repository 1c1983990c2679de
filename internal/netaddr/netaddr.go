// Package netaddr answers questions about host names and addresses that
// several parts of triage ask alike.
package netaddr

import (
	"net"
	"strings"
)

// Loopback reports whether host (a name or address, with or without a
// port, an IPv6 address with or without brackets) names this machine by
// a loopback name or address: "localhost", 127.0.0.0/8 or ::1.
func Loopback(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether addr (host:port, a listen address) listens
// on loopback only; an address without a port does not.
func LoopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	return err == nil && Loopback(h)
}
