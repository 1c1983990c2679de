//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/triagegw/triage/internal/testenv"
)

// A container, run as a runtime runs one, with what Linux gives a root
// process and nothing else: this test binary runs itself again in new
// mount, PID, network, UTS and IPC namespaces (initEnv tells it to), and
// there, as the process the runtime starts before the image's, makes the
// mounts (/proc, /sys read-only, a /dev of its own, /models read-only,
// the root filesystem read-only as the Helm chart has it), brings up the
// loopback interface, chroots into the unpacked image, takes the image's
// user and execs its entrypoint with its environment only. The image's
// process is then PID 1 of its namespace and sees no file of this
// machine but the model files.

// initEnv carries the JSON containerSpec to the re-executed test binary.
const initEnv = "TRIAGE_IMAGE_TEST_INIT"

type containerSpec struct {
	Rootfs     string   // the unpacked image
	Models     string   // mounted read-only at /models
	Argv       []string // entrypoint and cmd
	Env        []string
	WorkingDir string
	UID, GID   int
}

// setnsCall is setns(2)'s number, which package syscall does not name.
var setnsCall = map[string]uintptr{"amd64": 308, "arm64": 268}[runtime.GOARCH]

// canRun says why containers cannot run here, or "".
func canRun() string {
	if os.Geteuid() != 0 {
		return "running the image's process needs root (namespaces, mounts, chroot and setuid, as a container runtime uses them)"
	}
	if setnsCall == 0 {
		return "setns is not known on " + runtime.GOARCH
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: nsFlags}
	if err := cmd.Run(); err != nil {
		return fmt.Sprintf("new namespaces are refused here (%v): the image's process cannot be run as a runtime would", err)
	}
	return ""
}

const nsFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC

// container is a running image process.
type container struct {
	cmd    *exec.Cmd
	out    *testenv.Buffer // stdout and stderr
	stdout *testenv.Buffer
	done   chan struct{}
	err    error // Wait's, once done is closed
	client *http.Client
}

func startContainer(t *testing.T, spec containerSpec) *container {
	t.Helper()
	for _, d := range []string{"proc", "sys", "dev", "models"} {
		// Mount points, made as a runtime makes them.
		if err := os.MkdirAll(filepath.Join(spec.Rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &container{out: &testenv.Buffer{}, stdout: &testenv.Buffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(self, "-test.run=^$")
	c.cmd.Env = []string{initEnv + "=" + string(b)}
	c.cmd.Stdout = multiWriter{c.out, c.stdout}
	c.cmd.Stderr = c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: nsFlags, Pdeathsig: syscall.SIGKILL}
	// Started from a thread kept until the process exits: Pdeathsig
	// fires when the thread that started the process ends (and dialIn's
	// threads end), not only when this test process does.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting the container: %v", err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	pid := c.cmd.Process.Pid
	c.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialIn(ctx, pid, network, addr)
			},
		},
	}
	return c
}

// wait waits for the process to exit, for up to d.
func (c *container) wait(d time.Duration) (exited bool) {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

func (c *container) pid() int { return c.cmd.Process.Pid }

// dialIn connects to addr in the network namespace of pid: from a thread
// of its own that joins that namespace and is never handed back (the
// thread ends with its goroutine), so the socket is made there.
func dialIn(ctx context.Context, pid int, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- result{err: err}
			return
		}
		_, _, e := syscall.RawSyscall(setnsCall, f.Fd(), syscall.CLONE_NEWNET, 0)
		f.Close()
		if e != 0 {
			ch <- result{err: fmt.Errorf("setns into %d's network: %v", pid, e)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// containerInit is the re-executed test binary, in the new namespaces: it
// makes the container and execs the image's entrypoint, or exits 127
// saying what failed.
func containerInit(specJSON string) {
	runtime.LockOSThread() // no_new_privs is per thread: set it on the one that execs
	var s containerSpec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		initFail("spec", err)
	}
	r := s.Rootfs
	must := func(what string, err error) {
		if err != nil {
			initFail(what, err)
		}
	}
	must("make / private", syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""))
	must("bind the rootfs", syscall.Mount(r, r, "", syscall.MS_BIND|syscall.MS_REC, ""))
	must("mount /proc", syscall.Mount("proc", r+"/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""))
	must("mount /sys", syscall.Mount("sysfs", r+"/sys", "sysfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""))
	must("mount /dev", syscall.Mount("tmpfs", r+"/dev", "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "mode=755,size=64k"))
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}} {
		dev := int(d.major<<8 | d.minor)
		must("mknod /dev/"+d.name, syscall.Mknod(r+"/dev/"+d.name, syscall.S_IFCHR|0o666, dev))
		must("chmod /dev/"+d.name, os.Chmod(r+"/dev/"+d.name, 0o666))
	}
	must("bind /models", syscall.Mount(s.Models, r+"/models", "", syscall.MS_BIND|syscall.MS_REC, ""))
	must("make /models read-only", syscall.Mount("", r+"/models", "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	must("make the rootfs read-only", syscall.Mount("", r, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	must("bring lo up", loopbackUp())
	must("set the hostname", syscall.Sethostname([]byte("triage")))
	must("chroot", syscall.Chroot(r))
	must("chdir", syscall.Chdir(s.WorkingDir))
	must("no_new_privs", prctl(pr_SET_NO_NEW_PRIVS, 1))
	must("setgroups", syscall.Setgroups(nil))
	must("setgid", syscall.Setgid(s.GID))
	must("setuid", syscall.Setuid(s.UID))
	if len(s.Argv) == 0 || !strings.HasPrefix(s.Argv[0], "/") {
		initFail("exec", fmt.Errorf("entrypoint %q is not an absolute path", s.Argv))
	}
	must("exec "+s.Argv[0], syscall.Exec(s.Argv[0], s.Argv, s.Env))
}

func initFail(what string, err error) {
	fmt.Fprintf(os.Stderr, "container init: %s: %v\n", what, err)
	os.Exit(127)
}

const pr_SET_NO_NEW_PRIVS = 38

func prctl(option, arg uintptr) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, option, arg, 0); e != 0 {
		return e
	}
	return nil
}

// loopbackUp sets IFF_UP on lo, as a runtime does in a new network
// namespace (where lo starts down).
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var req struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [24]byte
	}
	copy(req.name[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	req.flags |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	return nil
}

// procStatus is the fields of /proc/PID/status.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// rssKiB is VmRSS of /proc/PID/status, in KiB.
func rssKiB(pid int) (int, error) {
	st, err := procStatus(pid)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(st["VmRSS"])
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("VmRSS %q", st["VmRSS"])
	}
	return strconv.Atoi(f[0])
}

// mappedFiles is the files the process has mapped (its executable and
// libraries), as paths seen from here.
func mappedFiles(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue // anonymous, [heap], [stack], [vdso]...
		}
		p := strings.Join(f[5:], " ")
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

type multiWriter []*testenv.Buffer

func (m multiWriter) Write(p []byte) (int, error) {
	for _, w := range m {
		if _, err := w.Write(p); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
