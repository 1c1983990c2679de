package h1

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/triagegw/triage/router/internal/rawio"
)

// Over TLS, plain and handed-over requests are served as over TCP, and
// the TLS sits on the raw connection (on Linux).
func TestTLSListener(t *testing.T) {
	certs := httptest.NewTLSServer(http.NotFoundHandler()) // for its certificate and a client that trusts it
	defer certs.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner := make(chan net.Conn, 8)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Method+" "+r.URL.Path)
	})
	tl := NewTLSListener(ln, certs.TLS)
	addr := serveOn(t, &Server{Handler: h}, &recordingListener{Listener: tl, conns: inner})
	client := certs.Client()
	for _, method := range []string{"GET", "POST", "OPTIONS"} {
		req, _ := http.NewRequest(method, "https://"+addr+"/x", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != method+" /x" {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, b)
		}
	}
	tc, ok := (<-inner).(*tls.Conn)
	if !ok {
		t.Fatal("the listener did not give a TLS connection")
	}
	// What rawio makes of a TCP connection here (raw on Linux, unless
	// the race detector is on).
	probe, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if got, want := fmt.Sprintf("%T", tc.NetConn()), fmt.Sprintf("%T", rawio.Wrap(probe)); got != want {
		t.Fatalf("TLS runs on %s, not on what rawio.Wrap gives (%s)", got, want)
	}
}

type recordingListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.conns <- c:
		default:
		}
	}
	return c, err
}
