package pool

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
)

func TestTLSValidate(t *testing.T) {
	pki := tlsconftest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	cfg := Config{Name: "p", Model: "m",
		Replicas: []Replica{{URL: "https://a:1"}, {URL: "http://b:1"}, {URL: "http://c:1"}},
		TLS:      TLS{CAFile: missing, CertFile: pki.ClientCertFile}}
	cfg.SetDefaults()
	var got []string
	for _, e := range cfg.Validate("pools[2]") {
		got = append(got, e.Error())
	}
	want := []string{
		"pools[2].tls: applies to https replicas only, and replicas[1], replicas[2] are http://",
		"pools[2].tls.ca_file: " + missing + ": no such file or directory",
		"pools[2].tls.key_file: required with cert_file",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Validate:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	cfg.Replicas = cfg.Replicas[:1]
	cfg.TLS = TLS{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.KeyFile}
	errs := cfg.Validate("pools[0]")
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "pools[0].tls.key_file: "+pki.KeyFile+": does not match the certificate in "+pki.ClientCertFile) {
		t.Fatalf("Validate with a mismatched key: %v", errs)
	}
}

func TestTLSBackends(t *testing.T) {
	pki := tlsconftest.New(t)
	build := func(tc TLS, urls ...string) *Pool {
		t.Helper()
		cfg := Config{Name: "p", Model: "m", TLS: tc}
		for _, u := range urls {
			cfg.Replicas = append(cfg.Replicas, Replica{URL: u})
		}
		cfg.SetDefaults()
		if errs := cfg.Validate("p"); errs != nil {
			t.Fatal(errs)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := build(TLS{}, "https://127.0.0.1:8443", "https://localhost:9443")
	withCA := build(TLS{CAFile: pki.CAFile}, "https://127.0.0.1:8443", "https://localhost:9443")
	named := build(TLS{CAFile: pki.CAFile, ServerName: "replica.internal"}, "https://127.0.0.1:8443")
	if b := plain.Backends()[0]; b.TLS != nil || b.Key != "https://127.0.0.1:8443" || plain.TLSDigest() != "" {
		t.Fatalf("a pool without tls: TLS %v, Key %q, digest %q", b.TLS, b.Key, plain.TLSDigest())
	}
	a, b := withCA.Backends()[0], withCA.Backends()[1]
	if a.TLS == nil || a.TLS.RootCAs == nil || a.TLS.ServerName != "127.0.0.1" || b.TLS.ServerName != "localhost" {
		t.Fatalf("backend TLS: %+v / %+v", a.TLS, b.TLS)
	}
	if withCA.TLSDigest() == "" {
		t.Fatal("a pool with a ca_file has no TLS digest")
	}
	if n := named.Backends()[0]; n.TLS.ServerName != "replica.internal" {
		t.Fatalf("server_name: %q", n.TLS.ServerName)
	}
	// The same address under other TLS settings: never the same connections.
	keys := map[string]bool{plain.Backends()[0].Key: true, a.Key: true, named.Backends()[0].Key: true}
	if len(keys) != 3 || !strings.HasPrefix(a.Key, "https://127.0.0.1:8443#tls=") {
		t.Fatalf("keys of one address under three TLS settings: %v", keys)
	}
	// Rewriting a file changes the digest, and with it the key.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	copyFile(t, pki.CAFile, caFile)
	before := build(TLS{CAFile: caFile}, "https://127.0.0.1:8443")
	copyFile(t, tlsconftest.New(t).CAFile, caFile)
	after := build(TLS{CAFile: caFile}, "https://127.0.0.1:8443")
	if d, _ := (TLS{CAFile: caFile}).Digest(); d != after.TLSDigest() || d == before.TLSDigest() {
		t.Fatal("the digest did not follow the CA file's content")
	}
	if before.Backends()[0].Key == after.Backends()[0].Key {
		t.Fatal("a rotated CA file kept the connection key")
	}
	// An http replica in a pool without tls settings keeps its plain key.
	if p := build(TLS{}, "http://127.0.0.1:8000"); p.Backends()[0].Key != "http://127.0.0.1:8000" {
		t.Fatalf("http key %q", p.Backends()[0].Key)
	}
}

// Health checks of a replica behind TLS use the pool's CA and client
// certificate.
func TestTLSHealthCheck(t *testing.T) {
	pki := tlsconftest.New(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusForbidden)
		}
	}))
	srv.TLS = pki.ServerConfig(t)
	srv.TLS.ClientCAs = pki.Pool()
	srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	srv.StartTLS()
	defer srv.Close()

	on := true
	for _, tc := range []struct {
		name    string
		tls     TLS
		healthy bool
	}{
		{"CA and client certificate", TLS{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, true},
		{"no client certificate", TLS{CAFile: pki.CAFile}, false},
		{"system roots", TLS{CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, false},
	} {
		cfg := Config{Name: "p", Model: "m", Replicas: []Replica{{URL: srv.URL}}, TLS: tc.tls,
			Health: Health{Enabled: &on, Interval: time.Hour, Timeout: 5 * time.Second}}
		cfg.SetDefaults()
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var tr Transition
		p.CheckOnce(context.Background(), p.Backends()[0], func(x Transition) { tr = x })
		if p.Healthy(p.Backends()[0]) != tc.healthy {
			t.Errorf("%s: healthy %v, want %v (%v)", tc.name, !tc.healthy, tc.healthy, tr.Err)
		}
		if c := p.Backends()[0].checkClient; c != nil {
			c.CloseIdleConnections()
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
