package router

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
	"github.com/triagegw/triage/sim"
)

// newTLSReplica is a simulated replica behind TLS with pki's server
// certificate, requiring a client certificate from pki's CA.
func newTLSReplica(t *testing.T, pki *tlsconftest.PKI, model, name string) string {
	t.Helper()
	s, err := sim.New(sim.Options{Model: model, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s)
	srv.TLS = pki.ServerConfig(t)
	srv.TLS.ClientCAs = pki.Pool()
	srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// A pool with tls reaches a replica that requires a client certificate;
// rewriting its CA file makes the next Apply rebuild the pool, while an
// Apply with nothing changed keeps it.
func TestPoolTLSAndRotation(t *testing.T) {
	pki := tlsconftest.New(t)
	url := newTLSReplica(t, pki, "m", "tls-0")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	copyFile(t, pki.CAFile, caFile)
	pc := poolCfg("p", "m", url)
	pc.TLS = pool.TLS{CAFile: caFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}
	h := newHarness(t, newConfig("", pc))

	r := h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if r.status != http.StatusOK || r.header.Get("X-Sim-Replica") != "tls-0" {
		t.Fatalf("through mTLS: %d %s", r.status, r.body)
	}

	p1 := h.gw.snap.Load().byName["p"].pool
	if err := h.gw.Apply(newConfig("", pc), nil); err != nil {
		t.Fatal(err)
	}
	if h.gw.snap.Load().byName["p"].pool != p1 {
		t.Fatal("a pool whose TLS files did not change was rebuilt")
	}

	// Another CA in the same file: the pool is rebuilt with it, and the
	// replica's certificate no longer verifies.
	copyFile(t, tlsconftest.New(t).CAFile, caFile)
	if err := h.gw.Apply(newConfig("", pc), nil); err != nil {
		t.Fatal(err)
	}
	if h.gw.snap.Load().byName["p"].pool == p1 {
		t.Fatal("a pool whose CA file was rewritten kept its old TLS config")
	}
	r = h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if r.status != http.StatusBadGateway {
		t.Fatalf("with a CA that did not sign the replica: %d %s, want 502", r.status, r.body)
	}
	if log := h.log.String(); !strings.Contains(log, "TLS handshake") || !strings.Contains(log, "certificate signed by unknown authority") {
		t.Fatalf("the access log does not say why:\n%s", log)
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
