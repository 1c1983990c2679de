package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
	"github.com/triagegw/triage/rules"
)

// startEncoderTLS runs "triage encode serve" with args on addr (""; a
// free loopback port) and waits for /ready to answer 200 over https with
// c.
func startEncoderTLS(t *testing.T, heads, models, at string, c *http.Client, args ...string) *proc {
	t.Helper()
	startEncoderSkip(t)
	for range 3 {
		addr := at
		if addr == "" {
			addr = freeAddr(t)
		}
		p := start(t, "encoder", append([]string{"encode", "serve", "--heads", heads, "--models", models, "--listen", addr}, args...)...)
		p.addr = addr
		err := p.waitOK(c, "https://"+addr+"/ready", 10*time.Second)
		if err == nil {
			return p
		}
		if !errors.Is(err, errPortTaken) || at != "" {
			t.Fatalf("%v\nstderr:\n%s", err, p.stderr.String())
		}
	}
	t.Fatal("encoder: could not get a free port in 3 tries")
	return nil
}

// TestEncodeServeTLS: encode serve over https with client certificates
// required (mTLS): tier 2 through it classifies as in process; a client
// trusting another CA, and one without a client certificate, are refused
// with errors that say which setting is at fault; a certificate rotated
// in place is served on the next connections.
func TestEncodeServeTLS(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	pki := tlsconftest.New(t)
	t.Setenv("ENC_TLS_KEY", "k-tls")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(t, true), DisableKeepAlives: true}, Timeout: 5 * time.Second}
	p := startEncoderTLS(t, heads, models, "", c, "--tls-cert", pki.CertFile, "--tls-key", pki.KeyFile, "--client-ca", pki.CAFile, "--api-key-env", "ENC_TLS_KEY")
	url := "https://" + p.addr

	classify := func(extra ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--heads", heads, "--models", models, "--tier", "2"}, extra...)
		err := runClassify(context.Background(), append(args, "how do I rebase onto main"), &stdout, &stderr)
		return stdout.String(), err
	}
	// Bad TLS flags are refused at start, naming the flag.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-ca", pki.CAFile}, "--client-ca needs --tls-cert and --tls-key"},
		{[]string{"--tls-cert", pki.CertFile}, "--tls-key required with --tls-cert"},
		{[]string{"--tls-cert", pki.CertFile + ".missing", "--tls-key", pki.KeyFile}, "--tls-cert " + pki.CertFile + ".missing: no such file"},
		{[]string{"--tls-cert", pki.CertFile, "--tls-key", pki.KeyFile, "--client-ca", pki.KeyFile}, "--client-ca " + pki.KeyFile + ": no certificate found"},
	} {
		args := append([]string{"serve", "--heads", heads, "--models", models, "--listen", "127.0.0.1:0"}, tc.args...)
		err := runEncode(context.Background(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("encode %v: %v, want %q", tc.args, err, tc.want)
		}
	}

	local, err := classify()
	if err != nil {
		t.Fatal(err)
	}
	remote := []string{"--encoder-url", url, "--encoder-api-key-env", "ENC_TLS_KEY", "--encoder-ca", pki.CAFile}
	got, err := classify(append(remote, "--encoder-cert", pki.ClientCertFile, "--encoder-key", pki.ClientKeyFile)...)
	if err != nil || got != local {
		t.Fatalf("classify over mTLS = %s (%v), want what tier 2 in process gives: %s", got, err, local)
	}

	other := tlsconftest.New(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"another CA trusted", []string{"--encoder-url", url, "--encoder-api-key-env", "ENC_TLS_KEY", "--encoder-ca", other.CAFile, "--encoder-cert", pki.ClientCertFile, "--encoder-key", pki.ClientKeyFile},
			[]string{"certificate signed by unknown authority", "does not verify against the CA bundle trusted"}},
		{"no client certificate", remote, []string{"requires a client certificate"}},
		{"a client certificate of another CA", append(remote, "--encoder-cert", other.ClientCertFile, "--encoder-key", other.ClientKeyFile),
			[]string{"refused the client certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := classify(tc.args...)
			if err == nil {
				t.Fatalf("classify = %s, want a refusal", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("classify: %v\nwant it to say %q", err, w)
				}
			}
		})
	}

	// Rotation: a new certificate written over the files is served to
	// the connections that follow.
	serial := func() (string, error) {
		conn, err := tls.Dial("tcp", p.addr, pki.ClientConfig(t, true))
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	before, err := serial()
	if err != nil || before != pki.Server.SerialNumber.String() {
		t.Fatalf("serial before rotation = %s (%v), want %s", before, err, pki.Server.SerialNumber)
	}
	rotated := pki.IssueServer(t, pki.CertFile, pki.KeyFile).SerialNumber.String()
	last, ok := testenv.Poll(10*time.Second, func() (bool, string) {
		s, err := serial()
		if err != nil {
			return false, err.Error()
		}
		return s == rotated, s
	})
	if !ok {
		t.Fatalf("after rotation the encoder still serves serial %s, want %s", last, rotated)
	}
	if !strings.Contains(p.stderr.String(), "TLS certificate reloaded") {
		t.Errorf("no reload logged:\n%s", p.stderr.String())
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.waitExit(t, 15*time.Second); code != 0 {
		t.Errorf("encode serve exited %d on SIGTERM, want 0", code)
	}
}

// TestEncodeServePlainKey: an API key on a plain-HTTP listener other than
// loopback is refused at start, naming the ways out; with
// --insecure-plain-http it serves. (Loopback with a key serves:
// TestEncodeServeProcess.)
func TestEncodeServePlainKey(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	startEncoderSkip(t)
	t.Setenv("ENC_PLAIN_KEY", "k")
	args := []string{"encode", "serve", "--heads", heads, "--models", models, "--api-key-env", "ENC_PLAIN_KEY"}
	p := start(t, "encoder", append(args, "--listen", "0.0.0.0:0")...)
	if code := p.waitExit(t, 15*time.Second); code != 2 {
		t.Fatalf("encode serve --api-key-env on 0.0.0.0 exited %d, want 2 (refused)\n%s", code, p.stderr.String())
	}
	for _, w := range []string{"not loopback", "in clear", "--tls-cert", "--insecure-plain-http"} {
		if !strings.Contains(p.stderr.String(), w) {
			t.Errorf("the refusal does not say %q:\n%s", w, p.stderr.String())
		}
	}
	for range 3 {
		addr := freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		p := start(t, "encoder", append(args, "--insecure-plain-http", "--listen", "0.0.0.0:"+port)...)
		p.addr = addr
		err := p.waitReady("/ready", 10*time.Second)
		if errors.Is(err, errPortTaken) {
			continue
		}
		if err != nil {
			t.Fatalf("with --insecure-plain-http: %v", err)
		}
		return
	}
	t.Fatal("encoder: could not get a free port in 3 tries")
}

// TestRemoteEncoderCARotation: the gateway's remote encoder trusts the CA
// bundle its rules name as the file holds it at the latest load: the file
// is among those watched, and a load after it changed talks to the engine
// with the new bundle (here, after the engine moved to a certificate of
// another CA), as a pool's replicas get a new transport.
func TestRemoteEncoderCARotation(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	oldCA, newCA := tlsconftest.New(t), tlsconftest.New(t)
	client := func(pki *tlsconftest.PKI) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(t, false), DisableKeepAlives: true}, Timeout: 5 * time.Second}
	}
	enc := startEncoderTLS(t, heads, models, "", client(oldCA), "--tls-cert", oldCA.CertFile, "--tls-key", oldCA.KeyFile)

	dir := t.TempDir()
	caFile := filepath.Join(dir, "encoder-ca.pem")
	copyFile(t, oldCA.CAFile, caFile)
	// Every text about computer science goes to tier 2; a budget no
	// busy machine misses; no result cache, which would answer again
	// without a call.
	rulesText := "alias: auto\nheads: " + heads + "\nclasses: {computer science: {requires_tier2: true}}\n" +
		"routes:\n  - {name: coding, when: {class: computer science}, pool: code}\ndefault: general\n" +
		"tier2: {enabled: true, budget: 5s, cache: 0, encoder: {url: \"https://" + enc.addr + "\", model: use-lite-int8, ca_file: encoder-ca.pem}}\n"
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rulesText), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := "listen: 127.0.0.1:0\ndefault_pool: general\nrules: rules.yaml\nmodels_dir: " + models + "\npools:\n" +
		"  - {name: general, model: m, replicas: [{url: \"http://127.0.0.1:9\"}]}\n  - {name: code, model: c, replicas: [{url: \"http://127.0.0.1:9\"}]}\n"
	if err := os.WriteFile(filepath.Join(dir, "triage.yaml"), []byte(gw), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cache := &lifecycle.Models{}
	load := func() *lifecycle.Routing {
		t.Helper()
		rt, err := cache.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	const text = "how do I rebase onto main"
	decide := func(rt *lifecycle.Routing) rules.Decision {
		return rt.Set.Decide(context.Background(), askAbout(rt.Set, "auto", text, nil))
	}
	rt := load()
	if !slices.Contains(rt.Files, caFile) {
		t.Errorf("the files watched %v lack the remote encoder's CA bundle %s", rt.Files, caFile)
	}
	if d := decide(rt); d.Tier != 2 {
		t.Fatalf("over https with the engine's CA: %+v, want a tier-2 decision", d)
	}

	// The engine restarts on a certificate of another CA: the client of
	// the old bundle is refused, and so is a load with the file unchanged.
	enc.signal(t, syscall.SIGTERM)
	enc.waitExit(t, 15*time.Second)
	startEncoderTLS(t, heads, models, enc.addr, client(newCA), "--tls-cert", newCA.CertFile, "--tls-key", newCA.KeyFile)
	if d := decide(rt); d.Tier == 2 || d.Reason != "tier2_error" {
		t.Fatalf("the old CA against the new certificate: %+v, want tier2_error", d)
	}
	copyFile(t, newCA.CAFile, caFile)
	if d := decide(load()); d.Tier != 2 {
		t.Fatalf("after the CA bundle was replaced and the rules loaded again: %+v, want a tier-2 decision", d)
	}
}

// copyFile replaces dst with src's content in one rename.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}
