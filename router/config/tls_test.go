package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
)

func TestLoadTLS(t *testing.T) {
	pki := tlsconftest.New(t) // files in pki.Dir; the config one level below refers to them relatively
	dir := filepath.Join(pki.Dir, "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Load(write(t, dir, "triage.yaml", `
server:
  tls: {cert_file: ../server.pem, key_file: ../server-key.pem, client_ca_file: ../ca.pem, client_auth: verify_if_given}
pools:
  - name: p
    model: m
    replicas: [{url: "https://127.0.0.1:8443"}]
    tls: {ca_file: ../ca.pem, cert_file: ../client.pem, key_file: ../client-key.pem, server_name: localhost}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := c.Server.TLS
	if st.CertFile != pki.CertFile || st.KeyFile != pki.KeyFile || st.ClientCAFile != pki.CAFile || st.ClientAuth != "verify_if_given" {
		t.Fatalf("server.tls not resolved against the config's directory: %+v", st)
	}
	pt := c.Pools[0].TLS
	if pt.CAFile != pki.CAFile || pt.CertFile != pki.ClientCertFile || pt.KeyFile != pki.ClientKeyFile || pt.ServerName != "localhost" {
		t.Fatalf("pools[0].tls not resolved: %+v", pt)
	}
	s, err := st.Load()
	if err != nil || s.Leaf().SerialNumber.Cmp(pki.Server.SerialNumber) != 0 {
		t.Fatalf("ServerTLS.Load: %v", err)
	}

	// Absolute paths stay as they are; the environment may set them.
	t.Setenv("TRIAGE_SERVER__TLS__CERT_FILE", pki.CertFile)
	t.Setenv("TRIAGE_SERVER__TLS__KEY_FILE", pki.KeyFile)
	c, err = Load(write(t, dir, "env.yaml", `
pools: [{name: p, model: m, replicas: [{url: "http://127.0.0.1:8000"}]}]
`))
	if err != nil || c.Server.TLS.CertFile != pki.CertFile || !c.Server.TLS.Enabled() {
		t.Fatalf("TLS from the environment: %v %+v", err, c)
	}
}

func TestLoadTLSReportsEveryProblem(t *testing.T) {
	pki := tlsconftest.New(t)
	dir := t.TempDir()
	write(t, dir, "garbage.pem", "hello")
	_, err := Load(write(t, dir, "bad.yaml", `
server:
  tls: {key_file: missing-key.pem, client_auth: sometimes}
pools:
  - name: p
    model: m
    replicas: [{url: "http://127.0.0.1:8000"}]
    tls: {ca_file: garbage.pem, cert_file: `+pki.ClientCertFile+`, key_file: `+pki.KeyFile+`}
  - name: q
    model: n
    replicas: [{url: "https://127.0.0.1:8443"}]
    tls: {ca_file: `+pki.CAFile+`, insecure_skip_verfy: true}
`))
	if err == nil {
		t.Fatal("Load accepted the config")
	}
	msg := err.Error()
	for _, want := range []string{
		"server.tls.cert_file: required with key_file",
		`server.tls.client_auth: must be require or verify_if_given, got "sometimes"`,
		"pools[0].tls: applies to https replicas only, and replicas[0] is http://",
		"pools[0].tls.ca_file: " + filepath.Join(dir, "garbage.pem") + ": no certificate found",
		"pools[0].tls.key_file: " + pki.KeyFile + ": does not match the certificate in " + pki.ClientCertFile,
		`pools[1].tls.insecure_skip_verfy: unknown field (did you mean "insecure_skip_verify"?)`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}

	_, err = Load(write(t, dir, "bad2.yaml", `
server:
  tls: {cert_file: garbage.pem, key_file: missing-key.pem}
pools: [{name: p, model: m, replicas: [{url: "http://127.0.0.1:8000"}]}]
`))
	for _, want := range []string{
		"server.tls.key_file: " + filepath.Join(dir, "missing-key.pem") + ": no such file or directory",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
