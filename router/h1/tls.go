package h1

import (
	"crypto/tls"
	"errors"
	"io"
	"time"
)

// handshake completes a TLS connection's handshake before its first
// request, bounded both ways by ReadTimeout (else the idle timeout): a
// client that connects and stalls the handshake, or never reads the
// server's flight, is cut then. It reports whether the handshake
// succeeded; failures are logged, except a client that left before saying
// anything.
func (c *conn) handshake(tc *tls.Conn) bool {
	d := c.s.ReadTimeout
	if d <= 0 {
		d = c.s.idleTimeout()
	}
	if d > 0 {
		_ = tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.Handshake(); err != nil {
		var rh tls.RecordHeaderError
		switch {
		case errors.As(err, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader):
			// Plain HTTP sent to the TLS port: say so, as net/http does.
			_ = rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(rh.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			c.s.logf("h1: TLS handshake error from %s: client sent an HTTP request to an HTTPS server", c.remote)
		case errors.Is(err, io.EOF):
		default:
			c.s.logf("h1: TLS handshake error from %s: %v", c.remote, err)
		}
		return false
	}
	_ = tc.SetDeadline(time.Time{}) // serve sets the read deadlines from here
	return true
}

// looksLikeHTTP reports whether a TLS record header is the start of a
// plain HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}
