package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The gateway's CPU is read as ../shared/bench's loadgen reads it:
// utime + stime of the process and its descendants from /proc/PID/stat
// at the start and end of the measured window, in USER_HZ ticks; its
// resident memory (VmRSS) is sampled during the window for the peak.

// clkTck is Linux's USER_HZ, the unit of utime and stime (100 on x86-64).
const clkTck = 100

// procTree returns root and its descendants.
func procTree(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return []int{root}
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if f := statFields(b); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields are /proc/PID/stat's fields after "(comm)": 0 is the state
// (field 3), 1 the parent (4), 11 utime (14), 12 stime (15).
func statFields(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil
	}
	return strings.Fields(string(b[i+2:]))
}

type procSample struct {
	rssKB  int64
	cpuSec float64
}

func sampleProcs(pids []int) procSample {
	var s procSample
	for _, pid := range pids {
		p := strconv.Itoa(pid)
		b, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			continue
		}
		if f := statFields(b); len(f) > 12 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			s.cpuSec += float64(ut+st) / clkTck
		}
		if b, err := os.ReadFile("/proc/" + p + "/status"); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					if f := strings.Fields(v); len(f) > 0 {
						kb, _ := strconv.ParseInt(f[0], 10, 64)
						s.rssKB += kb
					}
					break
				}
			}
		}
	}
	return s
}

// procWatch follows a process tree through a measured window.
type procWatch struct {
	pids   []int
	start  procSample
	mu     sync.Mutex
	maxRSS int64
	stop   chan struct{}
	done   chan struct{}
}

// startWatch samples root's tree now and every interval until finish;
// nil without a pid.
func startWatch(root int, every time.Duration) *procWatch {
	if root <= 0 {
		return nil
	}
	w := &procWatch{pids: procTree(root), stop: make(chan struct{}), done: make(chan struct{})}
	w.start = sampleProcs(w.pids)
	w.maxRSS = w.start.rssKB
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				s := sampleProcs(w.pids)
				w.mu.Lock()
				w.maxRSS = max(w.maxRSS, s.rssKB)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// finish returns the RSS at the start, the peak, and the CPU seconds
// used since the start.
func (w *procWatch) finish() (before, peak int64, cpuSec float64) {
	close(w.stop)
	<-w.done
	end := sampleProcs(w.pids)
	return w.start.rssKB, max(w.maxRSS, end.rssKB), round3(end.cpuSec - w.start.cpuSec)
}

// encCounts are an encoder service's text counters.
type encCounts struct{ ok, shed int64 }

// encoderCounts scrapes triage_encoder_texts_total from an encode serve's
// /metrics (zero counts without a URL).
func encoderCounts(url string) (encCounts, error) {
	var c encCounts
	if url == "" {
		return c, nil
	}
	if err := checkLoopback(url); err != nil {
		return c, err
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return c, fmt.Errorf("encoder metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("encoder metrics %s: status %d, %v", url, resp.StatusCode, err)
	}
	found := false
	for line := range strings.SplitSeq(string(b), "\n") {
		for _, m := range []struct {
			prefix string
			dst    *int64
		}{{`triage_encoder_texts_total{outcome="ok"} `, &c.ok}, {`triage_encoder_texts_total{outcome="shed"} `, &c.shed}} {
			if v, ok := strings.CutPrefix(line, m.prefix); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return c, fmt.Errorf("encoder metrics: %q: %w", line, err)
				}
				*m.dst, found = int64(f), true
			}
		}
	}
	if !found {
		return c, fmt.Errorf("encoder metrics %s: no triage_encoder_texts_total", url)
	}
	return c, nil
}
