package tlsconf

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Error is a problem with one setting: Field is its key as the config
// spells it (cert_file, key_file, ca_file, client_ca_file, client_auth) and
// File the file it names, when there is one.
type Error struct {
	Field string
	File  string
	Err   error
}

func (e *Error) Error() string {
	if e.File == "" {
		return e.Field + ": " + e.Err.Error()
	}
	return e.Field + " " + e.File + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Problems splits an error of this package into one problem per setting,
// each under prefix ("pools[0].tls", "server.tls") in the config's
// "path: problem" form: "server.tls.cert_file: /x.pem: no certificate found".
func Problems(prefix string, err error) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var te *Error
		switch {
		case errors.As(err, &te) && te.File != "":
			out = append(out, fmt.Errorf("%s.%s: %s: %w", prefix, te.Field, te.File, te.Err))
		case errors.As(err, &te):
			out = append(out, fmt.Errorf("%s.%s: %w", prefix, te.Field, te.Err))
		default:
			out = append(out, fmt.Errorf("%s: %w", prefix, err))
		}
	}
	walk(err)
	return out
}

// The edge's client-certificate modes, as the config spells them.
const (
	// RequireClientCert refuses a client without a certificate that chains
	// to the client CA. The default when a client CA is set.
	RequireClientCert = "require"
	// VerifyClientCertIfGiven lets clients without a certificate through
	// and verifies the certificate of those who send one.
	VerifyClientCertIfGiven = "verify_if_given"
)

func clientAuthType(mode string) (tls.ClientAuthType, error) {
	switch mode {
	case "", RequireClientCert:
		return tls.RequireAndVerifyClientCert, nil
	case VerifyClientCertIfGiven:
		return tls.VerifyClientCertIfGiven, nil
	}
	return 0, &Error{Field: "client_auth", Err: fmt.Errorf("must be %s or %s, got %q", RequireClientCert, VerifyClientCertIfGiven, mode)}
}

// Server is the edge's TLS configuration: a certificate, re-read by Reload,
// and optionally the CA that client certificates must chain to.
type Server struct {
	certFile, keyFile string
	caFile, authMode  string
	auth              tls.ClientAuthType

	mu     sync.Mutex // serialises Reload
	cur    atomic.Pointer[generation]
	config *tls.Config
}

// generation is what the files held at one load.
type generation struct {
	sum    [sha256.Size]byte // of the files' content
	cert   *tls.Certificate  // Leaf set
	client *tls.Config       // the config with client verification; nil without a client CA
}

// ServerOption adjusts a Server at construction.
type ServerOption func(*Server)

// ClientCA makes the edge verify client certificates against the CA bundle
// in file, with mode RequireClientCert ("" means it) or
// VerifyClientCertIfGiven. The bundle is re-read by Reload with the
// certificate.
func ClientCA(file, mode string) ServerOption {
	return func(s *Server) { s.caFile, s.authMode = file, mode }
}

// NewServer loads the certificate chain in certFile and its private key in
// keyFile (PEM). Every problem found is reported, each as an *Error (joined
// with errors.Join when there are several).
func NewServer(certFile, keyFile string, opts ...ServerOption) (*Server, error) {
	s := &Server{certFile: certFile, keyFile: keyFile}
	for _, o := range opts {
		o(s)
	}
	var errs []error
	switch {
	case s.certFile == "" && s.keyFile == "":
		errs = append(errs, &Error{Field: "cert_file", Err: errors.New("required")}, &Error{Field: "key_file", Err: errors.New("required")})
	case s.certFile == "":
		errs = append(errs, &Error{Field: "cert_file", Err: errors.New("required with key_file")})
	case s.keyFile == "":
		errs = append(errs, &Error{Field: "key_file", Err: errors.New("required with cert_file")})
	}
	if s.caFile == "" && s.authMode != "" {
		errs = append(errs, &Error{Field: "client_auth", Err: errors.New("needs client_ca_file")})
	}
	auth, err := clientAuthType(s.authMode)
	if err != nil {
		errs = append(errs, err)
	}
	s.auth = auth
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	g, err := s.load(nil)
	if err != nil {
		return nil, err
	}
	s.cur.Store(g)
	s.config = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
	}
	if s.caFile != "" {
		// The client CA changes with the certificate: the handshake takes
		// the whole configuration of the generation in effect.
		s.config.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().client, nil
		}
	}
	return s, nil
}

// Config is the configuration to serve with (tls.NewListener). It always
// hands out the certificate in effect.
func (s *Server) Config() *tls.Config { return s.config }

// Files lists the files the server reads: certificate, key and, when set,
// the client CA bundle.
func (s *Server) Files() []string {
	files := []string{s.certFile, s.keyFile}
	if s.caFile != "" {
		files = append(files, s.caFile)
	}
	return files
}

// Leaf is the certificate in effect (the first of the chain). Its
// validity dates are not checked on load: callers warn about them.
func (s *Server) Leaf() *x509.Certificate { return s.cur.Load().cert.Leaf }

// Reload re-reads the files and, when their content has changed, swaps in
// the new certificate (and client CA) for the handshakes that follow. On
// error the previous certificate stays in effect. It reports whether the
// certificate changed.
func (s *Server) Reload() (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.cur.Load()
	g, err := s.load(prev)
	if err != nil || g == prev {
		return false, err
	}
	s.cur.Store(g)
	return true, nil
}

// load reads the files and builds a generation from them; it returns prev
// itself when the content is the same.
func (s *Server) load(prev *generation) (*generation, error) {
	var errs []error
	read := func(field, file string) []byte {
		b, err := readFile(field, file)
		if err != nil {
			errs = append(errs, err)
		}
		return b
	}
	certPEM, keyPEM := read("cert_file", s.certFile), read("key_file", s.keyFile)
	var caPEM []byte
	if s.caFile != "" {
		caPEM = read("client_ca_file", s.caFile)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sum := sha256.Sum256(lengthPrefixed(certPEM, keyPEM, caPEM))
	if prev != nil && prev.sum == sum {
		return prev, nil
	}
	g := &generation{sum: sum}
	cert, err := keyPair(s.certFile, s.keyFile, certPEM, keyPEM)
	if err != nil {
		errs = append(errs, err)
	}
	g.cert = cert
	if s.caFile != "" {
		pool, err := certPool("client_ca_file", s.caFile, caPEM)
		if err != nil {
			errs = append(errs, err)
		}
		if cert != nil {
			g.client = &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   []string{"http/1.1"},
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   s.auth,
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

// NewClient builds the configuration for connecting to replicas over TLS:
// the CA bundle in caFile is the only trust (empty: the system roots), the
// certificate in certFile with the key in keyFile is presented to replicas
// that ask for one (both or neither), serverName overrides the name
// verified (empty: the replica's host, set by the caller per replica), and
// insecureSkipVerify turns verification off. Every problem found is
// reported, each as an *Error.
func NewClient(caFile, certFile, keyFile, serverName string, insecureSkipVerify bool) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"http/1.1"},
		ServerName:         serverName,
		InsecureSkipVerify: insecureSkipVerify,
	}
	var errs []error
	if caFile != "" {
		data, err := readFile("ca_file", caFile)
		if err == nil {
			cfg.RootCAs, err = certPool("ca_file", caFile, data)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case certFile == "" && keyFile != "":
		errs = append(errs, &Error{Field: "cert_file", Err: errors.New("required with key_file")})
	case certFile != "" && keyFile == "":
		errs = append(errs, &Error{Field: "key_file", Err: errors.New("required with cert_file")})
	case certFile != "":
		certPEM, err1 := readFile("cert_file", certFile)
		keyPEM, err2 := readFile("key_file", keyFile)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, err)
			break
		}
		cert, err := keyPair(certFile, keyFile, certPEM, keyPEM)
		if err != nil {
			errs = append(errs, err)
			break
		}
		cfg.Certificates = []tls.Certificate{*cert}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// Digest identifies the content of files (empty names are skipped): equal
// digests mean the files hold the same bytes.
func Digest(files ...string) (string, error) {
	var parts [][]byte
	for _, f := range files {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		parts = append(parts, []byte(f), b)
	}
	if len(parts) == 0 {
		return "", nil
	}
	sum := sha256.Sum256(lengthPrefixed(parts...))
	return hex.EncodeToString(sum[:]), nil
}

// lengthPrefixed joins parts so that different splits never collide.
func lengthPrefixed(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = fmt.Appendf(out, "%d:", len(p))
		out = append(out, p...)
	}
	return out
}

func readFile(field, file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return nil, &Error{Field: field, File: file, Err: err}
	}
	return b, nil
}

// certs parses every CERTIFICATE block of a PEM file.
func certs(field, file string, data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, &Error{Field: field, File: file, Err: fmt.Errorf("invalid certificate #%d: %v", len(out)+1, err)}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, &Error{Field: field, File: file, Err: errors.New("no certificate found (want PEM CERTIFICATE blocks)")}
	}
	return out, nil
}

func certPool(field, file string, data []byte) (*x509.CertPool, error) {
	cs, err := certs(field, file, data)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range cs {
		pool.AddCert(c)
	}
	return pool, nil
}

// keyPair checks a certificate chain and its key, with an error that names
// the file at fault.
func keyPair(certFile, keyFile string, certPEM, keyPEM []byte) (*tls.Certificate, error) {
	chain, err := certs("cert_file", certFile, certPEM)
	if err != nil {
		return nil, err
	}
	if !hasPrivateKey(keyPEM) {
		return nil, &Error{Field: "key_file", File: keyFile, Err: errors.New("no private key found (want a PEM PRIVATE KEY block)")}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "tls: ")
		if strings.Contains(msg, "does not match") {
			return nil, &Error{Field: "key_file", File: keyFile, Err: fmt.Errorf("does not match the certificate in %s", certFile)}
		}
		return nil, &Error{Field: "key_file", File: keyFile, Err: errors.New(msg)}
	}
	if pair.Leaf == nil {
		pair.Leaf = chain[0]
	}
	return &pair, nil
}

func hasPrivateKey(data []byte) bool {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			return true
		}
	}
}
