package main

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"time"
)

// debugHandler serves Go's profiles on server.debug_listen at the paths
// and in the formats of net/http/pprof, so `go tool pprof
// http://ADDR/debug/pprof/profile` works as usual. net/http/pprof itself is
// not linked: its index page executes an html/template, and a binary that
// executes templates keeps every exported method of every type it links
// (the linker cannot tell which a template might call): 10 MB of binary and
// 6 MiB of resident memory for a gateway that never needs them.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
		d := durationParam(r, 30*time.Second)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
		if err := pprof.StartCPUProfile(w); err != nil {
			http.Error(w, "could not start the CPU profile: "+err.Error(), http.StatusInternalServerError)
			return
		}
		sleep(r, d)
		pprof.StopCPUProfile()
	})
	mux.HandleFunc("GET /debug/pprof/trace", func(w http.ResponseWriter, r *http.Request) {
		d := durationParam(r, time.Second)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
		if err := trace.Start(w); err != nil {
			http.Error(w, "could not start the trace: "+err.Error(), http.StatusInternalServerError)
			return
		}
		sleep(r, d)
		trace.Stop()
	})
	mux.HandleFunc("GET /debug/pprof/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		p := pprof.Lookup(name)
		if p == nil {
			http.Error(w, "unknown profile "+strconv.Quote(name), http.StatusNotFound)
			return
		}
		if name == "heap" && r.FormValue("gc") != "" {
			runtime.GC()
		}
		debug, _ := strconv.Atoi(r.FormValue("debug"))
		if debug != 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		}
		_ = p.WriteTo(w, debug)
	})
	mux.HandleFunc("GET /debug/pprof/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		profiles := pprof.Profiles()
		sort.Slice(profiles, func(i, j int) bool { return profiles[i].Name() < profiles[j].Name() })
		fmt.Fprintln(w, "profile?seconds=N\ttrace?seconds=N")
		for _, p := range profiles {
			fmt.Fprintf(w, "%s\t%d\n", p.Name(), p.Count())
		}
	})
	return mux
}

func durationParam(r *http.Request, def time.Duration) time.Duration {
	if s, err := strconv.ParseFloat(r.FormValue("seconds"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return def
}

// sleep waits d, or less if the client leaves.
func sleep(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}
