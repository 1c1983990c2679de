package main

// End-to-end tests of TLS: the gateway serving HTTPS (server.tls) with its
// certificate rotated in place, and replicas reached over TLS with a
// private CA and a client certificate (pools[].tls).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
	"github.com/triagegw/triage/sim"

	"github.com/triagegw/triage/internal/testenv"
)

// httpsClient trusts pki's CA. Keep-alive is on: tests rely on a
// connection made before a rotation staying up.
func httpsClient(t *testing.T, pki *tlsconftest.PKI) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool()}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// startTLSGateway runs "triage serve --config cfgPath" on a free port and
// waits for /readyz to answer 200 over HTTPS with c.
func startTLSGateway(t *testing.T, cfgPath string, c *http.Client) *proc {
	t.Helper()
	for range 3 {
		addr := freeAddr(t)
		p := start(t, "gateway", "serve", "--config", cfgPath, "--listen", addr)
		p.addr = addr
		err := waitHTTPS(p, c, "https://"+addr+"/readyz", 10*time.Second)
		if err == nil {
			return p
		}
		if !errors.Is(err, errPortTaken) {
			t.Fatalf("%v\nstderr:\n%s", err, p.stderr.String())
		}
	}
	t.Fatal("gateway: could not get a free port in 3 tries")
	return nil
}

func waitHTTPS(p *proc, c *http.Client, url string, timeout time.Duration) error {
	return p.waitOK(c, url, timeout)
}

// peerSerial makes a request on a new connection and returns the serial of
// the certificate the gateway presented.
func peerSerial(pki *tlsconftest.PKI, url string) (string, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool()}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
}

func TestTLSServeEndToEnd(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	replica := startSim(t, "m-a", "replica-a")
	// The config sits beside the certificate files and names them
	// relatively.
	cfg := filepath.Join(pki.Dir, "triage.yaml")
	writeFile(t, cfg, "server:\n  read_timeout: 1s\n  tls: {cert_file: server.pem, key_file: server-key.pem}\n"+
		gatewayConfig("", poolSpec{name: "pool-a", model: "m-a", replicas: []*proc{replica}}))
	c := httpsClient(t, pki)
	gw := startTLSGateway(t, cfg, c)
	base := "https://" + gw.addr

	testenv.WaitWithin(t, 5*time.Second, `the gateway logs "triage listening" with "tls":true`, func() (bool, string) {
		for _, line := range strings.Split(gw.stderr.String(), "\n") {
			if strings.Contains(line, `"msg":"triage listening"`) && strings.Contains(line, `"tls":true`) {
				return true, ""
			}
		}
		return false, gw.stderr.String()
	})

	t.Run("json", func(t *testing.T) {
		r := mustChat(t, c, base, "m-a", http.StatusOK)
		if got := r.header.Get("X-Sim-Replica"); got != "replica-a" {
			t.Fatalf("X-Sim-Replica %q, want replica-a", got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, s := openStream(t, ctx, c, base, "m-a", map[string]string{"X-Sim-Chunks": "4"})
		if resp.TLS == nil || resp.TLS.NegotiatedProtocol == "h2" {
			t.Fatalf("stream: TLS state %+v, want TLS with HTTP/1.1", resp.TLS)
		}
		content, done, err := s.rest()
		if err != nil || !done {
			t.Fatalf("stream over TLS: want a clean end after data: [DONE], got done=%v err=%v", done, err)
		}
		if got, want := strings.Join(content, ""), "[replica-a] lorem ipsum dolor"; got != want {
			t.Fatalf("stream content %q, want %q", got, want)
		}
	})

	t.Run("refused", func(t *testing.T) {
		// A client that does not trust the CA fails the handshake; plain
		// HTTP on the TLS port gets 400.
		if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/healthz"); err == nil {
			t.Fatal("a client without the CA completed a request")
		}
		r := get(t, newClient(t), "http://"+gw.addr+"/healthz")
		if r.status != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the TLS port: %d %s, want 400", r.status, r.body)
		}
	})

	t.Run("stalled handshake", func(t *testing.T) {
		// Connected, then silent: cut by server.read_timeout (1s), not by
		// the idle timeout (120s).
		nc, err := net.Dial("tcp", gw.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		t0 := time.Now()
		_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.ReadAll(nc); err != nil || time.Since(t0) > 10*time.Second {
			t.Fatalf("a silent connection was closed after %v (%v), want about 1s", time.Since(t0).Round(time.Millisecond), err)
		}
	})

	t.Run("rotation", func(t *testing.T) {
		first := pki.Server.SerialNumber.String()
		if s, err := peerSerial(pki, base+"/healthz"); err != nil || s != first {
			t.Fatalf("serial before rotation %s (%v), want %s", s, err, first)
		}
		mustChat(t, c, base, "m-a", http.StatusOK) // c now holds a connection made with the first certificate

		next := pki.IssueServer(t, pki.CertFile, pki.KeyFile).SerialNumber.String()
		testenv.WaitWithin(t, 10*time.Second, "new connections see the rotated certificate", func() (bool, string) {
			s, err := peerSerial(pki, base+"/healthz")
			return err == nil && s == next, fmt.Sprintf("serial %s (%v), want %s", s, err, next)
		})
		// The connection made before the rotation goes on.
		resp, err := c.Get(base + "/healthz")
		if err != nil {
			t.Fatalf("the kept-alive connection after the rotation: %v", err)
		}
		resp.Body.Close()
		if got := resp.TLS.PeerCertificates[0].SerialNumber.String(); got != first {
			t.Fatalf("the kept-alive connection: serial %s, want the first certificate's %s (the connection should have been kept)", got, first)
		}
		testenv.WaitWithin(t, 5*time.Second, "the rotation is logged", func() (bool, string) {
			return strings.Contains(gw.stderr.String(), `"msg":"TLS certificate reloaded"`), "no TLS certificate reloaded line"
		})

		// A broken certificate file: logged, and the rotated certificate
		// stays in effect.
		failures := strings.Count(gw.stderr.String(), "TLS certificate reload failed")
		replaceFile(t, pki.CertFile, "not a certificate\n")
		testenv.WaitWithin(t, 10*time.Second, "a failed reload is logged", func() (bool, string) {
			return strings.Count(gw.stderr.String(), "TLS certificate reload failed") > failures, "no new failure logged"
		})
		testenv.WaitWithin(t, 5*time.Second, "the failure names the file and the problem", func() (bool, string) {
			return strings.Contains(gw.stderr.String(), "server.tls.cert_file: "+pki.CertFile+": no certificate found"), gw.stderr.String()
		})
		if s, err := peerSerial(pki, base+"/healthz"); err != nil || s != next {
			t.Fatalf("after a failed reload: serial %s (%v), want %s", s, err, next)
		}
		mustChat(t, c, base, "m-a", http.StatusOK)
	})
}

// tlsReplica serves a simulated replica over TLS with pki's server
// certificate, requiring a client certificate from pki's CA.
func tlsReplica(t *testing.T, pki *tlsconftest.PKI, model, name string) string {
	t.Helper()
	s, err := sim.New(sim.Options{Model: model, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s)
	srv.TLS = pki.ServerConfig(t)
	srv.TLS.ClientCAs = pki.Pool()
	srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestTLSUpstreamEndToEnd(t *testing.T) {
	t.Parallel()
	pki := tlsconftest.New(t)
	other := tlsconftest.New(t) // a CA that did not sign the replica
	url := tlsReplica(t, pki, "m-tls", "replica-tls")
	// Three pools reach the same replica under different TLS settings, so
	// a connection made with one must never serve another.
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem") // a copy, rewritten below
	writeFile(t, caFile, fileText(t, pki.CAFile))
	cfg := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfg, fmt.Sprintf(`pools:
  - name: good
    model: m-tls
    health: {interval: 200ms}
    replicas: [{url: %[1]q}]
    tls: {ca_file: %[2]q, cert_file: %[3]q, key_file: %[4]q}
  - name: wrong-ca
    model: m-wrong
    health: {enabled: false}
    retry: {attempts: 1}
    replicas: [{url: %[1]q}]
    tls: {ca_file: %[5]q, cert_file: %[3]q, key_file: %[4]q}
  - name: no-cert
    model: m-nocert
    health: {enabled: false}
    retry: {attempts: 1}
    replicas: [{url: %[1]q}]
    tls: {ca_file: %[2]q}
`, url, caFile, pki.ClientCertFile, pki.ClientKeyFile, other.CAFile))
	// Ready means the good pool's health checks passed over mutual TLS.
	gw := startGateway(t, cfg)
	c := newClient(t)
	base := gw.url("")

	r := mustChat(t, c, base, "m-tls", http.StatusOK)
	if got := r.header.Get("X-Sim-Replica"); got != "replica-tls" {
		t.Fatalf("X-Sim-Replica %q, want replica-tls", got)
	}

	for _, tc := range []struct{ model, pool, log string }{
		{"m-wrong", "wrong-ca", "certificate signed by unknown authority"},
		{"m-nocert", "no-cert", "certificate required"},
	} {
		r := mustChat(t, c, base, tc.model, http.StatusBadGateway)
		if !strings.Contains(string(r.body), `"code":"bad_gateway"`) {
			t.Fatalf("%s: 502 body %s", tc.model, r.body)
		}
		testenv.WaitWithin(t, 5*time.Second, tc.model+": the access log says why", func() (bool, string) {
			for _, line := range strings.Split(gw.stderr.String(), "\n") {
				if strings.Contains(line, `"pool":"`+tc.pool+`"`) && strings.Contains(line, `"status":502`) && strings.Contains(line, tc.log) {
					return true, ""
				}
			}
			return false, "no 502 line for pool " + tc.pool + " mentioning " + tc.log
		})
	}
	// The good pool is unaffected.
	mustChat(t, c, base, "m-tls", http.StatusOK)

	// Its CA file rewritten in place: the reload rebuilds the pool with the
	// new content (here a CA that did not sign the replica), and back.
	replaceFile(t, caFile, fileText(t, other.CAFile))
	testenv.WaitWithin(t, 10*time.Second, "a rewritten ca_file takes effect", func() (bool, string) {
		r, err := chat(t, c, base, "m-tls", nil)
		return err == nil && r.status >= 500, fmt.Sprintf("%d %s (%v)", r.status, r.body, err)
	})
	replaceFile(t, caFile, fileText(t, pki.CAFile))
	testenv.WaitWithin(t, 10*time.Second, "the restored ca_file takes effect", func() (bool, string) {
		r, err := chat(t, c, base, "m-tls", nil)
		return err == nil && r.status == http.StatusOK, fmt.Sprintf("%d %s (%v)", r.status, r.body, err)
	})
}

func fileText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
