package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireRedisEnv is the variable that turns a skip for a missing
// redis-server into a failure when it is "1".
const RequireRedisEnv = "TRIAGE_REQUIRE_REDIS"

// redisReady bounds how long a started redis-server may take to answer
// PING (it answers in milliseconds; a loaded CI machine may be slow).
const redisReady = 10 * time.Second

// Redis starts a redis-server of its own for t, on a free loopback port,
// without persistence, and returns its address. stop kills it (SIGKILL,
// as a crash would: clients see their connections reset and new ones
// refused) and start starts it again on the same port, empty; both may be
// called any number of times, and t's cleanup stops it. A real server
// rather than an imitation, so that Lua scripts, TIME and expiry behave as
// in production.
//
// Without redis-server on PATH it skips t, or fails it when
// TRIAGE_REQUIRE_REDIS=1 (make test sets it; scripts/install-redis.sh
// installs the server).
func Redis(t testing.TB) (addr string, stop func(), start func()) {
	t.Helper()
	s := newRedis(t)
	start = func() {
		t.Helper()
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
	}
	return s.addr(), s.stop, start
}

// RedisStalls starts a redis-server as Redis does, and returns pause,
// which stops it with SIGSTOP (it keeps its port and connections, and
// the kernel still accepts connections and buffers what clients send,
// but it answers nothing: a stalled or partitioned Redis), and resume,
// which continues it with SIGCONT (it then runs what was buffered).
// t's cleanup kills it, stopped or not.
func RedisStalls(t testing.TB) (addr string, pause, resume func()) {
	t.Helper()
	f := RedisWithFaults(t)
	return f.Addr, f.Pause, f.Resume
}

// newRedis starts a redis-server for t (or skips t, see Redis), stopped
// by t's cleanup.
func newRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not on PATH: run scripts/install-redis.sh (apt-get install redis-server)"
		if os.Getenv(RequireRedisEnv) == "1" {
			t.Fatal(msg + " (" + RequireRedisEnv + "=1)")
		}
		t.Skip(msg + " (" + RequireRedisEnv + "=1 makes this a failure)")
	}
	s := &redisServer{bin: bin, dir: t.TempDir()}
	// A free port is only free until someone takes it: try a few.
	for try := 0; ; try++ {
		s.port = FreePort(t)
		err := s.start()
		if err == nil {
			break
		}
		if try == 2 {
			t.Fatal(err)
		}
	}
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// redisServer is one redis-server process, and the port it keeps across
// restarts.
type redisServer struct {
	bin  string
	dir  string // its working directory: nothing is saved, but never in the package's
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// start starts the server unless it runs, and waits until it answers
// PING.
func (s *redisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	out := &Buffer{}
	cmd := exec.Command(s.bin,
		"--save", "", "--appendonly", "no",
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: starting %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	deadline := time.Now().Add(redisReady)
	for {
		if ping(addr) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("testenv: redis-server on port %d exited at start:\n%s", s.port, out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("testenv: redis-server on port %d did not answer PING within %s:\n%s", s.port, redisReady, out)
		}
	}
}

// stop kills the server, if it runs, and waits for it to exit (so that
// its port is free for start).
func (s *redisServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// ping sends PING to the server at addr and expects +PONG: a server that
// is loading or still binding answers otherwise or not at all.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// FreePort is a loopback TCP port no one listened on a moment ago, and
// not one it gave before in this process: a port just released can be
// handed out again at once, and two servers of one test (a gateway and
// its replica, or a Redis stopped to test an outage and kept for its
// restart) given the same port would collide.
func FreePort(t testing.TB) int {
	t.Helper()
	portsGiven.Lock()
	defer portsGiven.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven.m[port] {
			portsGiven.m[port] = true
			return port
		}
	}
}

var portsGiven = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// RedisFaults is a redis-server that a test can kill, start again empty
// and stall, as a deployment's Redis is restarted and stalls: Kill and
// Start are Redis's stop and start, Pause and Resume RedisStalls's. Pid
// is the live process's id (0 while killed).
type RedisFaults struct {
	Addr                       string
	Kill, Start, Pause, Resume func()
	s                          *redisServer
}

// Pid is the running redis-server's process id, 0 while it is killed.
func (f *RedisFaults) Pid() int {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if f.s.cmd == nil {
		return 0
	}
	return f.s.cmd.Process.Pid
}

// RedisWithFaults starts a redis-server for t as Redis does (skipping
// or failing t without one) and returns its controls; t's cleanup kills
// it, stopped or not.
func RedisWithFaults(t testing.TB) *RedisFaults {
	t.Helper()
	s := newRedis(t)
	signal := func(sig syscall.Signal) func() {
		return func() {
			t.Helper()
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.cmd == nil {
				t.Fatal("testenv: redis-server is not running")
			}
			if err := s.cmd.Process.Signal(sig); err != nil {
				t.Fatalf("testenv: redis-server: %v", err)
			}
		}
	}
	start := func() {
		t.Helper()
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
	}
	return &RedisFaults{Addr: s.addr(), Kill: s.stop, Start: start,
		Pause: signal(syscall.SIGSTOP), Resume: signal(syscall.SIGCONT), s: s}
}
