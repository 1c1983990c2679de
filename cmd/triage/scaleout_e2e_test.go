package main

// Scale-out, proved: three gateway processes behind one address (nginx
// from Debian standing in for a Kubernetes Service), sharing Redis.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// nginxBin finds nginx (scripts/install-nginx.sh installs it); the test
// fails without it rather than pass without proving anything.
func nginxBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("NGINX"), "/usr/sbin/nginx"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	t.Fatal("nginx is not installed: run scripts/install-nginx.sh (make test does)")
	return ""
}

// lb is nginx balancing one address round-robin over the gateways, as a
// Service would: a new upstream connection per request (no keep-alive to
// the gateways), and a request whose connection was refused goes to the
// next gateway (never one that reached a gateway: a POST may be
// generating).
type lb struct {
	url, dir, conf string
	cmd            *exec.Cmd
	gen            int // the config's generation, which /lb-generation answers
}

func (n *lb) write(t *testing.T, addr string, gateways []string) {
	t.Helper()
	var up strings.Builder
	for _, g := range gateways {
		fmt.Fprintf(&up, "    server %s max_fails=0;\n", g) // tried every time: a restarted gateway is back at once
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // workers that can read the temp dir
	}
	writeFile(t, n.conf, fmt.Sprintf(`%sworker_processes 1;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream triage {
%[3]s  }
  server {
    listen %[4]s;
    location = /lb-generation { return 200 "%[5]d"; }
    location / {
      proxy_pass http://triage;
      proxy_buffering off;
      proxy_next_upstream error timeout;
      proxy_connect_timeout 1s;
    }
  }
}
`, user, n.dir, up.String(), addr, n.gen))
}

// set points the balancer at gateways, as a Service's endpoints change:
// nginx reloads, and its old worker finishes the requests it has.
func (n *lb) set(t *testing.T, gateways []string) {
	t.Helper()
	old := n.workers(t)
	n.gen++
	n.write(t, strings.TrimPrefix(n.url, "http://"), gateways)
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The change has spread once the old worker has finished what it
	// had accepted and exited, and a new connection is answered from the
	// new config.
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	want := strconv.Itoa(n.gen)
	testenv.WaitWithin(t, 10*time.Second, "nginx's old worker gone and config generation "+want+" answering", func() (bool, string) {
		now := n.workers(t)
		for _, w := range old {
			if slices.Contains(now, w) {
				return false, "workers " + strings.Join(now, " ") + ", old " + strings.Join(old, " ")
			}
		}
		resp, err := c.Get(n.url + "/lb-generation")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b) == want, "generation " + string(b)
	})
}

// workers are the pids of nginx's worker processes (its master's
// children).
func (n *lb) workers(t *testing.T) []string {
	t.Helper()
	pid := n.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func startNginx(t *testing.T, gateways []string) *lb {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	n := &lb{url: "http://" + addr, dir: dir, conf: filepath.Join(dir, "nginx.conf")}
	n.write(t, addr, gateways)
	n.cmd = exec.Command(nginxBin(t), "-p", dir, "-c", n.conf)
	var stderr testenv.Buffer
	n.cmd.Stderr = &stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("starting nginx: %v", err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = n.cmd.Process.Kill()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("---- nginx ----\n%s%s", stderr.String(), b)
		}
	})
	c := &http.Client{Timeout: time.Second}
	testenv.WaitWithin(t, 10*time.Second, "nginx to answer", func() (bool, string) {
		resp, err := c.Get(n.url + "/readyz")
		if err != nil {
			return false, err.Error() + "\n" + stderr.String()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprintf("%d\n%s", resp.StatusCode, stderr.String())
	})
	return n
}

// startGatewayAt runs a gateway on addr (to restart one where the balancer
// expects it) and waits for /readyz.
func startGatewayAt(t *testing.T, name, cfgPath, addr string) *proc {
	t.Helper()
	p := start(t, name, "serve", "--config", cfgPath, "--listen", addr)
	p.addr = addr
	if err := p.waitReady("/readyz", 15*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestScaleOut(t *testing.T) {
	models := testenv.Models(t, "tables/subjects-tier1.tbl")
	redisAddr, _, _ := testenv.Redis(t)
	gen := startSim(t, "llama", "gen")
	code := startSim(t, "coder", "code")
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	// A keyword rule is a confident decision, so it starts a session;
	// later turns without the keyword stay with it.
	writeFile(t, rules, "alias: auto\nheads: "+filepath.Join(repoRoot(), "models", "heads", "subjects")+
		"\nwindow: {user_turns: 1}\nroutes:\n  - {name: coding, when: {keywords: [HTTP server]}, pool: code}\ndefault: general\nsession: {turns: 5}\n")
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfgPath, gatewayConfig("10s", poolSpec{name: "general", model: "llama", replicas: []*proc{gen}}, poolSpec{name: "code", model: "coder", replicas: []*proc{code}})+
		"models_dir: "+models+"\nrules: rules.yaml\naccess:\n  redis: {addr: "+redisAddr+", timeout: 200ms}\n")
	var gws []*proc
	var addrs []string
	for i := range 3 {
		g := startGatewayAt(t, fmt.Sprintf("gateway %d", i), cfgPath, freeAddr(t))
		gws = append(gws, g)
		addrs = append(addrs, g.addr)
	}
	nginx := startNginx(t, addrs)
	lb := nginx.url
	c := newClient(t)

	t.Run("a conversation keeps its pool whichever replica takes a turn", func(t *testing.T) {
		for conv := range 3 {
			msgs := fmt.Sprintf(`{"role":"system","content":"conversation %d"},{"role":"user","content":"Write a Go HTTP server"}`, conv)
			for i, next := range []string{"", "now add TLS", "and tests?", "and a Dockerfile?"} {
				if next != "" {
					msgs += `,{"role":"assistant","content":"Here you go."},{"role":"user","content":"` + next + `"}`
				}
				// The turn before was recorded by another replica a Redis
				// round trip ago (and the replicas subscribe as they
				// start): a person's next turn comes far later, so the turn
				// is asked again until the session has spread.
				testenv.WaitWithin(t, testenv.WaitTimeout, fmt.Sprintf("conversation %d turn %d routed to code by its session", conv, i+1), func() (bool, string) {
					req, _ := http.NewRequest("POST", lb+"/v1/chat/completions", strings.NewReader(`{"model":"auto","messages":[`+msgs+`]}`))
					req.Header.Set("Content-Type", "application/json")
					resp, err := c.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("conversation %d turn %d: status %d", conv, i+1, resp.StatusCode)
					}
					return resp.Header.Get("X-Sim-Replica") == "code" && (i == 0 || resp.Header.Get("X-Triage-Reason") == "session"),
						fmt.Sprintf("from %q, reason %q", resp.Header.Get("X-Sim-Replica"), resp.Header.Get("X-Triage-Reason"))
				})
			}
		}
	})

	t.Run("rolling every replica loses no request", func(t *testing.T) {
		var sent, failed atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				// A new connection to the balancer per request: its reloads
				// close kept-alive client connections, a race between the
				// client and nginx that has nothing to do with the gateways.
				client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					stream := (w+i)%2 == 0
					body := fmt.Sprintf(`{"model":"auto","stream":%v,"messages":[{"role":"user","content":"hello %d-%d"}]}`, stream, w, i)
					req, _ := http.NewRequest("POST", lb+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					sent.Add(1)
					resp, err := client.Do(req)
					var b []byte
					if err == nil {
						b, err = readAllBody(resp)
						if err == nil && (resp.StatusCode != 200 || (stream && !strings.Contains(string(b), "data: [DONE]"))) {
							err = fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
						}
					}
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				}
			})
		}
		// Traffic is under way before the first replica leaves.
		testenv.Wait(t, func() bool { return sent.Load() >= 40 }, "40 requests sent")
		for i, g := range gws {
			// As Kubernetes rolls a pod: its endpoint leaves the Service
			// (and the pod's preStop waits for that to spread), then
			// SIGTERM, which drains what it still serves; the new pod
			// joins once ready.
			others := append(append([]string{}, addrs[:i]...), addrs[i+1:]...)
			nginx.set(t, others)
			g.signal(t, syscall.SIGTERM)
			if code := g.waitExit(t, 15*time.Second); code != 0 {
				t.Errorf("gateway %d exited %d after SIGTERM", i, code)
			}
			gws[i] = startGatewayAt(t, fmt.Sprintf("gateway %d (restarted)", i), cfgPath, g.addr)
			nginx.set(t, addrs)
		}
		close(stop)
		wg.Wait()
		t.Logf("%d requests through three rolling restarts, %d failed", sent.Load(), failed.Load())
		if failed.Load() != 0 {
			t.Fatalf("%d of %d requests failed; the first: %v", failed.Load(), sent.Load(), firstErr.Load())
		}
		if sent.Load() < 50 {
			t.Fatalf("only %d requests sent: the load did not run through the restarts", sent.Load())
		}
	})
}

func readAllBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
