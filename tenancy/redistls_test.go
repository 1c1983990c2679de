package tenancy

import (
	"bufio"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/tlsconf/tlsconftest"
)

// redisTLS starts a real redis-server that speaks only TLS, with the
// certificate pki issued for 127.0.0.1, and returns its address once it
// answers PING over TLS.
func redisTLS(t *testing.T, pki *tlsconftest.PKI) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(testenv.RequireRedisEnv) == "1" {
			t.Fatal("redis-server is not on PATH: run scripts/install-redis.sh")
		}
		t.Skip("redis-server is not on PATH: run scripts/install-redis.sh (" + testenv.RequireRedisEnv + "=1 makes this a failure)")
	}
	port := testenv.FreePort(t)
	var out testenv.Buffer
	cmd := exec.Command(bin, "--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", pki.CertFile, "--tls-key-file", pki.KeyFile, "--tls-ca-cert-file", pki.CAFile, "--tls-auth-clients", "no")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := &tls.Config{RootCAs: pki.Pool(), ServerName: "127.0.0.1"}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, conf); err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.TrimSpace(line) == "+PONG" {
				return addr
			}
		}
		select {
		case <-done:
			t.Fatalf("redis-server with TLS exited at start:\n%s", out.String())
		case <-time.After(20 * time.Millisecond): // its listen is no event this process can wait on
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server with TLS did not answer within 10s:\n%s", out.String())
		}
	}
}

// TestRedisTLS: with access.redis.tls the store speaks TLS to a real
// redis-server that speaks nothing else, verifying its certificate
// against ca_file; without TLS, or against another CA, it cannot reach it.
func TestRedisTLS(t *testing.T) {
	pki := tlsconftest.New(t)
	addr := redisTLS(t, pki)
	other := tlsconftest.New(t)
	for _, tc := range []struct {
		name    string
		tls     RedisTLS
		healthy bool
	}{
		{"tls with its CA", RedisTLS{Enabled: true, CAFile: pki.CAFile}, true},
		{"tls with its CA and a server name", RedisTLS{Enabled: true, CAFile: pki.CAFile, ServerName: "localhost"}, true},
		{"tls with another CA", RedisTLS{Enabled: true, CAFile: other.CAFile}, false},
		{"tls for a name the certificate lacks", RedisTLS{Enabled: true, CAFile: pki.CAFile, ServerName: "redis.example"}, false},
		{"plain", RedisTLS{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewRedisStore(RedisConfig{Addr: addr, Timeout: time.Second, TLS: tc.tls}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Healthy() != tc.healthy {
				t.Fatalf("Healthy() = %v after the first ping, want %v", s.Healthy(), tc.healthy)
			}
			if !tc.healthy {
				return
			}
			total, err := s.Report(t.Context(), "tls-test:"+tc.name, "r1", 1, 5, time.Minute)
			if err != nil || total != 5 {
				t.Fatalf("Report over TLS = %d, %v", total, err)
			}
		})
	}
}

// TestRedisTLSConfig: tls settings are checked with the config, every
// problem at once, each under access.redis.tls.
func TestRedisTLSConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  RedisTLS
		want []string
	}{
		{"settings while off", RedisTLS{CAFile: "/ca.pem"}, []string{"access.redis.tls.enabled: false, yet other tls settings are given"}},
		{"missing CA", RedisTLS{Enabled: true, CAFile: "/nonexistent/ca.pem"}, []string{"access.redis.tls.ca_file: /nonexistent/ca.pem"}},
		{"cert without key", RedisTLS{Enabled: true, CertFile: "/c.pem"}, []string{"access.redis.tls.key_file: required with cert_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := RedisConfig{Addr: "127.0.0.1:6379", TLS: tc.tls}
			errs := c.Validate()
			joined := ""
			for _, e := range errs {
				joined += e.Error() + "\n"
			}
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("Validate() = %q, want %q", joined, w)
				}
			}
			if _, err := NewRedisStore(c, nil); err == nil {
				t.Error("NewRedisStore accepted it")
			}
		})
	}
}
