package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The debug listener answers `go tool pprof` at net/http/pprof's paths.
func TestDebugHandlerServesProfiles(t *testing.T) {
	srv := httptest.NewServer(debugHandler())
	defer srv.Close()
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, _, body := get("/debug/pprof/"); code != 200 || !strings.Contains(body, "heap\t") || !strings.Contains(body, "goroutine\t") {
		t.Fatalf("index: %d %q", code, body)
	}
	for _, path := range []string{"/debug/pprof/heap?gc=1", "/debug/pprof/allocs", "/debug/pprof/goroutine", "/debug/pprof/profile?seconds=0.2"} {
		code, ctype, body := get(path)
		// pprof's protobuf format is gzipped.
		if code != 200 || ctype != "application/octet-stream" || !strings.HasPrefix(body, "\x1f\x8b") {
			t.Errorf("%s: %d %s, %d bytes starting %q", path, code, ctype, len(body), body[:min(len(body), 8)])
		}
	}
	if code, ctype, body := get("/debug/pprof/goroutine?debug=1"); code != 200 || !strings.HasPrefix(ctype, "text/plain") || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("goroutine?debug=1: %d %s %.80q", code, ctype, body)
	}
	if code, _, body := get("/debug/pprof/trace?seconds=0.1"); code != 200 || len(body) == 0 {
		t.Errorf("trace: %d, %d bytes", code, len(body))
	}
	if code, _, _ := get("/debug/pprof/nope"); code != http.StatusNotFound {
		t.Errorf("unknown profile: %d, want 404", code)
	}
}
