package h1

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
)

func serveTLS(t *testing.T, s *Server) (addr string, client *http.Client, pki *tlsconftest.PKI) {
	t.Helper()
	pki = tlsconftest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := pki.ServerConfig(t)
	cfg.NextProtos = []string{"http/1.1"}
	done := make(chan error, 1)
	go func() { done <- s.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	tr := &http.Transport{TLSClientConfig: pki.ClientConfig(t, false)}
	t.Cleanup(tr.CloseIdleConnections)
	return ln.Addr().String(), &http.Client{Transport: tr, Timeout: 5 * time.Second}, pki
}

func TestTLSRequests(t *testing.T) {
	addr, c, _ := serveTLS(t, &Server{Handler: http.HandlerFunc(echo), ReadTimeout: 5 * time.Second})
	base := "https://" + addr
	for range 2 { // the second on the kept-alive connection
		resp, err := c.Post(base+"/v1/x?q=1", "application/json", strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"a":1}` || resp.Header.Get("X-Path") != "/v1/x" || resp.TLS == nil {
			t.Fatalf("POST over TLS: %d %q %v", resp.StatusCode, b, resp.Header)
		}
	}
	// A request the fast path leaves to net/http (a chunked body) is served
	// over the same TLS connection.
	req, _ := http.NewRequest(http.MethodPost, base+"/chunked", io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")))
	req.ContentLength = -1
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "abcd" {
		t.Fatalf("chunked POST over TLS: %d %q", resp.StatusCode, b)
	}
}

// A client that connects and never completes the handshake is cut by
// ReadTimeout, not left to the (longer) idle timeout.
func TestTLSHandshakeBoundedByReadTimeout(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(echo), ReadTimeout: 300 * time.Millisecond, IdleTimeout: time.Minute,
		ErrorLog: log.New(io.Discard, "", 0)}
	addr, _, _ := serveTLS(t, s)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a hello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00}}, // a record header promising 512 bytes, then a few
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(tc.send); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(c)
		if el := time.Since(t0); err != nil || el > 5*time.Second {
			t.Fatalf("%s: the server closed the connection after %v (%v), want about the read timeout", tc.name, el, err)
		}
	}
}

func TestTLSPortAnswersPlainHTTP(t *testing.T) {
	addr, _, _ := serveTLS(t, &Server{Handler: http.HandlerFunc(echo), ReadTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)})
	c, br := rawConn(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, body := readResp(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "HTTPS") {
		t.Fatalf("plain HTTP to the TLS port: %d %q", resp.StatusCode, body)
	}
}
