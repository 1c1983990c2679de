package deploy

import (
	"bufio"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/tenancy"
)

// secretRef is where an env variable of c comes from, nil if not a Secret.
func secretRef(c *corev1.Container, name string) *corev1.SecretKeySelector {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

// TestRedisAuth: the chart's Redis requires a password that the chart
// generates into a Secret (never a value, a new one per rendering without
// a cluster to read the old from), that Redis and the gateway both take
// from that Secret, and that a real redis-server started with the
// container's own arguments enforces.
func TestRedisAuth(t *testing.T) {
	o := mustRender(t, "--set", "redis.enabled=true")
	sec := o.Secrets[release+"-redis-auth"]
	if sec == nil {
		t.Fatalf("no Secret %s-redis-auth among %v", release, o.kinds)
	}
	password := string(sec.Data["password"])
	if !regexp.MustCompile(`^[A-Za-z0-9]{32}$`).MatchString(password) {
		t.Fatalf("generated password %q: want 32 letters and digits", password)
	}
	if again := mustRender(t, "--set", "redis.enabled=true").Secrets[release+"-redis-auth"]; string(again.Data["password"]) == password {
		t.Fatal("two renderings generated the same password: it is not generated")
	}
	values, err := os.ReadFile(chartDir() + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(values), password) {
		t.Fatal("the password is in values.yaml")
	}

	rd := o.Deployments[release+"-redis"]
	if rd == nil {
		t.Fatalf("no Redis Deployment among %v", o.kinds)
	}
	rc := &rd.Spec.Template.Spec.Containers[0]
	_, gw := o.gateway(t)
	for _, ref := range []struct {
		c    *corev1.Container
		name string
	}{{rc, "REDIS_PASSWORD"}, {rc, "REDISCLI_AUTH"}, {gw, "REDIS_PASSWORD"}} {
		if s := secretRef(ref.c, ref.name); s == nil || s.Name != sec.Name || s.Key != "password" {
			t.Errorf("%s's %s from %+v, want Secret %s key password", ref.c.Name, ref.name, s, sec.Name)
		}
	}
	i := slices.Index(rc.Args, "--requirepass")
	if i < 0 || i+1 >= len(rc.Args) || rc.Args[i+1] != "$(REDIS_PASSWORD)" {
		t.Fatalf("Redis args %q: want --requirepass $(REDIS_PASSWORD)", rc.Args)
	}
	t.Setenv("REDIS_PASSWORD", password) // as the pod's env has it
	if cfg := o.loadConfig(t); cfg.Access.Redis.PasswordEnv != "REDIS_PASSWORD" {
		t.Fatalf("access.redis.password_env %q, want REDIS_PASSWORD", cfg.Access.Redis.PasswordEnv)
	}

	// The container's arguments, expanded as the kubelet expands them, on
	// a real redis-server bound to loopback.
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(testenv.RequireRedisEnv) == "1" {
			t.Fatal("redis-server is not on PATH: run scripts/install-redis.sh")
		}
		t.Skip("redis-server is not on PATH: run scripts/install-redis.sh (" + testenv.RequireRedisEnv + "=1 makes this a failure)")
	}
	args := make([]string, len(rc.Args))
	for j, a := range rc.Args {
		args[j] = strings.ReplaceAll(a, "$(REDIS_PASSWORD)", password)
	}
	port := testenv.FreePort(t)
	cmd := exec.Command(bin, append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir())...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var conn net.Conn
	// The server's listen is not an event this process can wait on.
	testenv.WaitWithin(t, 10*time.Second, "redis-server with the chart's arguments to listen", func() (bool, string) {
		if conn, err = net.DialTimeout("tcp", addr, time.Second); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	say := func(cmd string) string {
		t.Helper()
		if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(line)
	}
	if got := say("PING"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("PING without the password: %q, want -NOAUTH", got)
	}
	if got := say("AUTH wrong-password"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("AUTH with another password: %q, want -WRONGPASS", got)
	}
	if got := say("AUTH " + password); got != "+OK" {
		t.Fatalf("AUTH with the Secret's password: %q", got)
	}
	if got := say("PING"); got != "+PONG" {
		t.Fatalf("PING after AUTH: %q", got)
	}
}

// TestRedisExistingSecret: redis.auth.existingSecret replaces the
// generated Secret everywhere.
func TestRedisExistingSecret(t *testing.T) {
	o := mustRender(t, "--set", "redis.enabled=true,redis.auth.existingSecret=ops-redis,redis.auth.key=pw")
	if len(o.Secrets) != 0 {
		t.Fatalf("Secrets %v rendered with auth.existingSecret", o.kinds)
	}
	_, gw := o.gateway(t)
	rc := &o.Deployments[release+"-redis"].Spec.Template.Spec.Containers[0]
	for _, c := range []*corev1.Container{gw, rc} {
		if s := secretRef(c, "REDIS_PASSWORD"); s == nil || s.Name != "ops-redis" || s.Key != "pw" {
			t.Errorf("%s's REDIS_PASSWORD from %+v, want ops-redis key pw", c.Name, s)
		}
	}
}

// TestServiceMonitorTLS: over https the ServiceMonitor carries the
// tlsConfig given, and the chart refuses https without a serverName (the
// pod IPs Prometheus scrapes are not in the certificate) or an explicit
// insecureSkipVerify.
func TestServiceMonitorTLS(t *testing.T) {
	// /metrics on the gateway's own port (metricsPort 0): scraped over its TLS.
	tlsOn := "metricsPort=0,serviceMonitor.enabled=true,config.triage.server.tls.cert_file=/etc/triage/tls/tls.crt,config.triage.server.tls.key_file=/etc/triage/tls/tls.key"
	if out, err := render(t, "--set", tlsOn); err == nil || !strings.Contains(err.Error(), "serviceMonitor.tlsConfig: the gateway serves TLS") {
		t.Fatalf("https without tlsConfig: %v\n%s", err, out)
	}
	if _, err := render(t, "--set", tlsOn+",serviceMonitor.tlsConfig.ca.secret.name=triage-tls"); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("a CA Secret without its key rendered: %v", err)
	}
	o := mustRender(t, "--set", tlsOn+",serviceMonitor.tlsConfig.serverName=triage.ai.svc,serviceMonitor.tlsConfig.ca.secret.name=triage-tls,serviceMonitor.tlsConfig.ca.secret.key=ca.crt")
	sm := o.ServiceMonitors[release]
	if sm == nil || len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("no ServiceMonitor endpoint among %v", o.kinds)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.ServerName != "triage.ai.svc" || ep.TLSConfig.CA == nil ||
		ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.CA.Secret.Name != "triage-tls" || ep.TLSConfig.CA.Secret.Key != "ca.crt" {
		t.Fatalf("endpoint %+v: want https with the tlsConfig given", ep)
	}
	// Plain http: no tlsConfig needed, none written.
	if ep := mustRender(t, "--set", "metricsPort=0,serviceMonitor.enabled=true").ServiceMonitors[release].Spec.Endpoints[0]; ep.Scheme != "http" || ep.TLSConfig != nil || ep.Port != "http" {
		t.Fatalf("plain endpoint %+v", ep)
	}
	// /metrics apart (the default): plain http on its own port, whatever
	// the gateway's port serves, so no tlsConfig is asked for.
	if ep := mustRender(t, "--set", strings.TrimPrefix(tlsOn, "metricsPort=0,")).ServiceMonitors[release].Spec.Endpoints[0]; ep.Scheme != "http" || ep.Port != "metrics" || ep.TLSConfig != nil {
		t.Fatalf("metrics apart, gateway on TLS: endpoint %+v", ep)
	}
}

// TestRedisTLSEndToEnd: with redis.tls.enabled the chart generates a CA
// and a certificate for the Redis Service's names, Redis serves TLS only,
// and the gateway verifies it with the CA: a real redis-server started
// with the container's arguments, and the gateway's own Redis store made
// from the ConfigMap's config, agree over TLS, password included.
func TestRedisTLSEndToEnd(t *testing.T) {
	o := mustRender(t, "--set", "redis.enabled=true,redis.tls.enabled=true")
	sec, auth := o.Secrets[release+"-redis-tls"], o.Secrets[release+"-redis-auth"]
	if sec == nil || auth == nil {
		t.Fatalf("no TLS and password Secrets among %v", o.kinds)
	}
	dir := t.TempDir()
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if len(sec.Data[k]) == 0 {
			t.Fatalf("Secret %s lacks %s", sec.Name, k)
		}
		if err := os.WriteFile(filepath.Join(dir, k), sec.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	service := release + "-redis"
	ca, leaf := parseCert(t, sec.Data["ca.crt"]), parseCert(t, sec.Data["tls.crt"])
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range []string{service, service + ".default.svc", service + ".default.svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("the certificate for %s: %v", name, err)
		}
	}

	rd := o.Deployments[service]
	rc := &rd.Spec.Template.Spec.Containers[0]
	if v := volume(rd, "tls"); v.Secret == nil || v.Secret.SecretName != sec.Name || mountPath(rc.VolumeMounts, "tls") != "/tls" {
		t.Fatalf("Redis's tls volume %+v mounted at %q", v, mountPath(rc.VolumeMounts, "tls"))
	}
	d, gw := o.gateway(t)
	if v := volume(d, "redis-tls"); v.Secret == nil || v.Secret.SecretName != sec.Name || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "ca.crt" {
		t.Fatalf("the gateway's redis-tls volume %+v: want only ca.crt of %s", v, sec.Name)
	}
	caPath := mountPath(gw.VolumeMounts, "redis-tls") + "/ca.crt"

	// Redis, with the container's arguments: the Secret's files where the
	// pod mounts them, the password as the kubelet expands it, a free port.
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(testenv.RequireRedisEnv) == "1" {
			t.Fatal("redis-server is not on PATH: run scripts/install-redis.sh")
		}
		t.Skip("redis-server is not on PATH: run scripts/install-redis.sh (" + testenv.RequireRedisEnv + "=1 makes this a failure)")
	}
	password := string(auth.Data["password"])
	port := testenv.FreePort(t)
	var args []string
	for j, a := range rc.Args {
		switch {
		case j > 0 && rc.Args[j-1] == "--tls-port":
			a = strconv.Itoa(port)
		case strings.HasPrefix(a, "/tls/"):
			a = filepath.Join(dir, strings.TrimPrefix(a, "/tls/"))
		}
		args = append(args, strings.ReplaceAll(a, "$(REDIS_PASSWORD)", password))
	}
	if !slices.Contains(rc.Args, "--tls-port") || !slices.Contains(args, "0") {
		t.Fatalf("Redis args %q: want TLS only (--port 0, --tls-port)", rc.Args)
	}
	var out testenv.Buffer
	cmd := exec.Command(bin, append(args, "--bind", "127.0.0.1", "--dir", t.TempDir())...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// The gateway's config as the ConfigMap has it, the CA at its path here.
	_, data := o.configFiles(t)
	cfgText := strings.ReplaceAll(data["triage.yaml"], caPath, filepath.Join(dir, "ca.crt"))
	if cfgText == data["triage.yaml"] {
		t.Fatalf("triage.yaml does not name %s:\n%s", caPath, data["triage.yaml"])
	}
	if err := os.WriteFile(filepath.Join(dir, "triage.yaml"), []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(data["rules.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REDIS_PASSWORD", password)
	cfg, err := config.Load(filepath.Join(dir, "triage.yaml"))
	if err != nil {
		t.Fatalf("the gateway refuses the chart's triage.yaml: %v", err)
	}
	rcfg := cfg.Access.Redis
	if !rcfg.TLS.Enabled || rcfg.Addr != service+":6379" {
		t.Fatalf("access.redis %+v: want TLS to %s:6379", rcfg, service)
	}
	// The Service's name verified, at the local server's address.
	rcfg.TLS.ServerName, rcfg.Addr, rcfg.Timeout = service, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second
	var store *tenancy.RedisStore
	// The server's listen is not an event this process can wait on.
	testenv.WaitWithin(t, 10*time.Second, "the gateway's store to reach redis-server over TLS", func() (bool, string) {
		if store, err = tenancy.NewRedisStore(rcfg, nil); err != nil {
			t.Fatal(err)
		}
		if store.Healthy() {
			return true, ""
		}
		store.Close()
		return false, "redis-server's output:\n" + out.String()
	})
	defer store.Close()
	if n, err := store.Report(t.Context(), "chart-tls", "r1", 1, 7, time.Minute); err != nil || n != 7 {
		t.Fatalf("Report over TLS = %d, %v", n, err)
	}
	// In the clear, the port answers nothing a client can use.
	plain := rcfg
	plain.TLS = tenancy.RedisTLS{}
	if s, err := tenancy.NewRedisStore(plain, nil); err != nil || s.Healthy() {
		t.Fatalf("a plain client reached the TLS-only Redis (err %v)", err)
	} else {
		s.Close()
	}
}

func parseCert(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatalf("not PEM: %q", p)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
