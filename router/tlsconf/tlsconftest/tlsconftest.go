// Package tlsconftest generates throwaway TLS material for tests: a CA, a
// server certificate for 127.0.0.1, ::1 and localhost, and a client
// certificate, all ECDSA P-256, written as PEM files to a temporary
// directory.
package tlsconftest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA and the certificates it issued, with their files.
type PKI struct {
	// Dir holds the files.
	Dir string
	// CAFile is the CA certificate.
	CAFile string
	// CertFile and KeyFile are the server certificate and its key.
	CertFile, KeyFile string
	// ClientCertFile and ClientKeyFile are the client certificate (common
	// name "triage-client") and its key.
	ClientCertFile, ClientKeyFile string
	// CA, Server and Client are the certificates.
	CA, Server, Client *x509.Certificate

	caKey *ecdsa.PrivateKey
}

// New makes a CA, a server and a client certificate in a new temporary
// directory of tb's.
func New(tb testing.TB) *PKI {
	tb.Helper()
	dir := tb.TempDir()
	p := &PKI{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "server.pem"),
		KeyFile:        filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: "triage test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("tlsconftest: CA: %v", err)
	}
	p.CA, err = x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlsconftest: CA: %v", err)
	}
	p.caKey = key
	writePEM(tb, p.CAFile, "CERTIFICATE", der)
	p.Server = p.IssueServer(tb, p.CertFile, p.KeyFile)
	p.Client = p.IssueClient(tb, p.ClientCertFile, p.ClientKeyFile)
	return p
}

// IssueServer issues a server certificate for 127.0.0.1, ::1 and localhost
// with a fresh serial and key, and writes both to the given files, each
// replaced in one rename. edit, if given, adjusts the template first (to
// date it in the past, say).
func (p *PKI) IssueServer(tb testing.TB, certFile, keyFile string, edit ...func(*x509.Certificate)) *x509.Certificate {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return p.issue(tb, tmpl, certFile, keyFile, edit)
}

// IssueClient issues a client certificate (common name "triage-client")
// and writes it and its key to the given files.
func (p *PKI) IssueClient(tb testing.TB, certFile, keyFile string, edit ...func(*x509.Certificate)) *x509.Certificate {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "triage-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return p.issue(tb, tmpl, certFile, keyFile, edit)
}

func (p *PKI) issue(tb testing.TB, tmpl *x509.Certificate, certFile, keyFile string, edit []func(*x509.Certificate)) *x509.Certificate {
	tb.Helper()
	key := newKey(tb)
	tmpl.SerialNumber = serial(tb)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	for _, e := range edit {
		e(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, &key.PublicKey, p.caKey)
	if err != nil {
		tb.Fatalf("tlsconftest: issuing %s: %v", tmpl.Subject.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlsconftest: %v", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("tlsconftest: %v", err)
	}
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "PRIVATE KEY", kder)
	return c
}

// Pool is a certificate pool holding the CA.
func (p *PKI) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA)
	return pool
}

// ServerConfig serves the server certificate as it is in the files now.
func (p *PKI) ServerConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	return &tls.Config{Certificates: []tls.Certificate{p.Pair(tb, p.CertFile, p.KeyFile)}}
}

// ClientConfig trusts the CA and, with cert, presents the client
// certificate.
func (p *PKI) ClientConfig(tb testing.TB, cert bool) *tls.Config {
	tb.Helper()
	c := &tls.Config{RootCAs: p.Pool()}
	if cert {
		c.Certificates = []tls.Certificate{p.Pair(tb, p.ClientCertFile, p.ClientKeyFile)}
	}
	return c
}

// Pair loads a certificate and key written by this package.
func (p *PKI) Pair(tb testing.TB, certFile, keyFile string) tls.Certificate {
	tb.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		tb.Fatalf("tlsconftest: %v", err)
	}
	return c
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("tlsconftest: key: %v", err)
	}
	return k
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatalf("tlsconftest: serial: %v", err)
	}
	return n.Add(n, big.NewInt(1))
}

// writePEM writes one PEM block to a temporary file beside path and renames
// it over path, so a reader never sees half a file.
func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatalf("tlsconftest: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatalf("tlsconftest: %v", err)
	}
}
