package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/tlsconf"
	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
)

// echoServer serves cfg on a loopback port, echoing what each connection
// sends; peers records the client certificates it saw.
type echoServer struct {
	addr  string
	mu    sync.Mutex
	peers []*x509.Certificate
}

func serve(t *testing.T, cfg *tls.Config) *echoServer {
	t.Helper()
	s := &echoServer{}
	s.addr = testenv.ServeConns(t, func(c net.Conn) {
		tc := tls.Server(c, cfg) // as tls.NewListener's Accept wraps it
		defer tc.Close()
		if err := tc.Handshake(); err != nil {
			return
		}
		if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
			s.mu.Lock()
			s.peers = append(s.peers, pc[0])
			s.mu.Unlock()
		}
		_, _ = io.Copy(tc, tc)
	})
	return s
}

func (s *echoServer) lastPeer() *x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.peers) == 0 {
		return nil
	}
	return s.peers[len(s.peers)-1]
}

// dial connects, completes one echo (so that a refused client certificate,
// reported after the handshake in TLS 1.3, shows), and returns the
// connection.
func dial(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := echo(c); err != nil {
		c.Close()
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func echo(c *tls.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return errors.New("echo answered " + string(b))
	}
	return nil
}

func serialOf(c *tls.Conn) string {
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestServerHandshake(t *testing.T) {
	pki := tlsconftest.New(t)
	s, err := tlsconf.NewServer(pki.CertFile, pki.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s.Config())

	c, err := dial(t, srv.addr, &tls.Config{RootCAs: pki.Pool()})
	if err != nil {
		t.Fatalf("handshake with the CA: %v", err)
	}
	st := c.ConnectionState()
	if st.Version < tls.VersionTLS12 || st.NegotiatedProtocol != "" && st.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("version %x, ALPN %q", st.Version, st.NegotiatedProtocol)
	}
	if got, want := serialOf(c), pki.Server.SerialNumber.String(); got != want {
		t.Fatalf("serial %s, want %s", got, want)
	}
	if _, err := dial(t, srv.addr, &tls.Config{RootCAs: x509.NewCertPool()}); err == nil {
		t.Fatal("handshake without the CA succeeded")
	}
	if _, err := dial(t, srv.addr, &tls.Config{RootCAs: pki.Pool(), NextProtos: []string{"h2"}}); err == nil {
		t.Fatal("a client offering only h2 was accepted: ALPN must be http/1.1 only")
	}
	if _, err := dial(t, srv.addr, &tls.Config{RootCAs: pki.Pool(), MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("TLS 1.1 was accepted")
	}
}

func TestServerClientCertificate(t *testing.T) {
	pki := tlsconftest.New(t)
	other := tlsconftest.New(t) // a client certificate from another CA
	for _, mode := range []string{"", tlsconf.RequireClientCert, tlsconf.VerifyClientCertIfGiven} {
		t.Run("mode="+mode, func(t *testing.T) {
			s, err := tlsconf.NewServer(pki.CertFile, pki.KeyFile, tlsconf.ClientCA(pki.CAFile, mode))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, s.Config())
			if _, err := dial(t, srv.addr, pki.ClientConfig(t, true)); err != nil {
				t.Fatalf("with the client certificate: %v", err)
			}
			if p := srv.lastPeer(); p == nil || p.SerialNumber.Cmp(pki.Client.SerialNumber) != 0 {
				t.Fatalf("the server saw client certificate %v, want serial %s", p, pki.Client.SerialNumber)
			}
			_, err = dial(t, srv.addr, pki.ClientConfig(t, false))
			if mode == tlsconf.VerifyClientCertIfGiven {
				if err != nil {
					t.Fatalf("verify_if_given refused a client without a certificate: %v", err)
				}
			} else if err == nil {
				t.Fatal("a client without a certificate was accepted")
			}
			foreign := &tls.Config{RootCAs: pki.Pool(), Certificates: []tls.Certificate{other.Pair(t, other.ClientCertFile, other.ClientKeyFile)}}
			if _, err := dial(t, srv.addr, foreign); err == nil {
				t.Fatal("a client certificate from another CA was accepted")
			}
		})
	}
}

func TestServerReload(t *testing.T) {
	pki := tlsconftest.New(t)
	s, err := tlsconf.NewServer(pki.CertFile, pki.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s.Config())
	cfg := &tls.Config{RootCAs: pki.Pool()}
	old, err := dial(t, srv.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := pki.Server.SerialNumber.String()

	if changed, err := s.Reload(); changed || err != nil {
		t.Fatalf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}

	next := pki.IssueServer(t, pki.CertFile, pki.KeyFile)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload after rotation = %v, %v; want true, nil", changed, err)
	}
	if got := s.Leaf().SerialNumber.String(); got != next.SerialNumber.String() {
		t.Fatalf("Leaf serial %s, want %s", got, next.SerialNumber)
	}
	c, err := dial(t, srv.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := serialOf(c); got != next.SerialNumber.String() {
		t.Fatalf("after Reload a new handshake saw serial %s, want %s", got, next.SerialNumber)
	}
	if err := echo(old); err != nil || serialOf(old) != first {
		t.Fatalf("the connection made before the rotation: %v (serial %s, want %s)", err, serialOf(old), first)
	}

	// A bad file at reload: an error that names it, and the certificate in
	// effect stays.
	for _, tc := range []struct {
		name  string
		spoil func()
		want  string
	}{
		{"garbage cert", func() { write(t, pki.CertFile, "not a certificate") }, "cert_file " + pki.CertFile + ": no certificate found"},
		{"missing key", func() { os.Remove(pki.KeyFile) }, "key_file " + pki.KeyFile + ": no such file or directory"},
		{"key of another cert", func() {
			pki.IssueServer(t, filepath.Join(pki.Dir, "x.pem"), pki.KeyFile)
		}, "key_file " + pki.KeyFile + ": does not match the certificate in " + pki.CertFile},
	} {
		certPEM, _ := os.ReadFile(pki.CertFile)
		keyPEM, _ := os.ReadFile(pki.KeyFile)
		tc.spoil()
		changed, err := s.Reload()
		if changed || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: Reload = %v, %v; want an error with %q", tc.name, changed, err, tc.want)
		}
		var te *tlsconf.Error
		if !errors.As(err, &te) {
			t.Fatalf("%s: error %v is not a *tlsconf.Error", tc.name, err)
		}
		c, err := dial(t, srv.addr, cfg)
		if err != nil || serialOf(c) != next.SerialNumber.String() {
			t.Fatalf("%s: after a failed Reload: %v, want the previous certificate", tc.name, err)
		}
		write(t, pki.CertFile, string(certPEM))
		write(t, pki.KeyFile, string(keyPEM))
	}
}

func TestServerExpiredLoads(t *testing.T) {
	pki := tlsconftest.New(t)
	pki.IssueServer(t, pki.CertFile, pki.KeyFile, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	})
	s, err := tlsconf.NewServer(pki.CertFile, pki.KeyFile)
	if err != nil {
		t.Fatalf("an expired certificate must load (callers warn): %v", err)
	}
	if !s.Leaf().NotAfter.Before(time.Now()) {
		t.Fatalf("Leaf NotAfter %v", s.Leaf().NotAfter)
	}
}

func TestNewServerErrors(t *testing.T) {
	pki := tlsconftest.New(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	write(t, garbage, "hello")
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name      string
		cert, key string
		opts      []tlsconf.ServerOption
		want      []string
	}{
		{"no key", pki.CertFile, "", nil, []string{"key_file: required with cert_file"}},
		{"no cert", "", pki.KeyFile, nil, []string{"cert_file: required with key_file"}},
		{"only a client CA", "", "", []tlsconf.ServerOption{tlsconf.ClientCA(pki.CAFile, "")}, []string{"cert_file: required", "key_file: required"}},
		{"missing files", missing, missing, nil, []string{
			"cert_file " + missing + ": no such file or directory", "key_file " + missing + ": no such file or directory"}},
		{"garbage cert", garbage, pki.KeyFile, nil, []string{"cert_file " + garbage + ": no certificate found"}},
		{"garbage key", pki.CertFile, garbage, nil, []string{"key_file " + garbage + ": no private key found"}},
		{"mismatch", pki.CertFile, pki.ClientKeyFile, nil, []string{"key_file " + pki.ClientKeyFile + ": does not match the certificate in " + pki.CertFile}},
		{"bad client ca", pki.CertFile, pki.KeyFile, []tlsconf.ServerOption{tlsconf.ClientCA(garbage, "")}, []string{"client_ca_file " + garbage + ": no certificate found"}},
		{"bad mode", pki.CertFile, pki.KeyFile, []tlsconf.ServerOption{tlsconf.ClientCA(pki.CAFile, "always")}, []string{`client_auth: must be require or verify_if_given, got "always"`}},
		{"mode without ca", pki.CertFile, pki.KeyFile, []tlsconf.ServerOption{tlsconf.ClientCA("", "require")}, []string{"client_auth: needs client_ca_file"}},
	} {
		_, err := tlsconf.NewServer(tc.cert, tc.key, tc.opts...)
		if err == nil {
			t.Errorf("%s: NewServer succeeded", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}

func TestNewClient(t *testing.T) {
	pki := tlsconftest.New(t)
	s, err := tlsconf.NewServer(pki.CertFile, pki.KeyFile, tlsconf.ClientCA(pki.CAFile, tlsconf.RequireClientCert))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s.Config())

	cfg, err := tlsconf.NewClient(pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile, "localhost", false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "http/1.1" {
		t.Fatalf("client config: min version %x, ALPN %v", cfg.MinVersion, cfg.NextProtos)
	}
	if _, err := dial(t, srv.addr, cfg); err != nil {
		t.Fatalf("mTLS with NewClient's config: %v", err)
	}
	if p := srv.lastPeer(); p == nil || p.SerialNumber.Cmp(pki.Client.SerialNumber) != 0 {
		t.Fatal("the client certificate was not presented")
	}

	// Without the client certificate the server refuses; with the system
	// roots the server's certificate is not trusted.
	noCert, err := tlsconf.NewClient(pki.CAFile, "", "", "localhost", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srv.addr, noCert); err == nil {
		t.Fatal("no client certificate: the server accepted")
	}
	system, err := tlsconf.NewClient("", pki.ClientCertFile, pki.ClientKeyFile, "localhost", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srv.addr, system); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("system roots: %v, want an unknown authority", err)
	}
	insecure, err := tlsconf.NewClient("", pki.ClientCertFile, pki.ClientKeyFile, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srv.addr, insecure); err != nil {
		t.Fatalf("insecure_skip_verify: %v", err)
	}
	wrongName, err := tlsconf.NewClient(pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile, "replica.example", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srv.addr, wrongName); err == nil {
		t.Fatal("a server name the certificate does not carry was accepted")
	}

	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	write(t, garbage, "hello")
	_, err = tlsconf.NewClient(garbage, "", pki.ClientKeyFile, "", false)
	for _, w := range []string{"ca_file " + garbage + ": no certificate found", "cert_file: required with key_file"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("NewClient error %v lacks %q", err, w)
		}
	}
}

func TestDigest(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	write(t, a, "one")
	d1, err := tlsconf.Digest(a, "")
	if err != nil || d1 == "" {
		t.Fatalf("Digest = %q, %v", d1, err)
	}
	if d, _ := tlsconf.Digest(a); d != d1 {
		t.Fatal("Digest is not stable")
	}
	write(t, a, "two")
	if d, _ := tlsconf.Digest(a); d == d1 {
		t.Fatal("Digest did not change with the content")
	}
	if d, err := tlsconf.Digest("", ""); d != "" || err != nil {
		t.Fatalf("Digest of no file = %q, %v", d, err)
	}
	if _, err := tlsconf.Digest(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("Digest of a missing file succeeded")
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
