package router

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"
)

func TestLogLineIsValidJSON(t *testing.T) {
	var out bytes.Buffer
	l := newLine(time.Date(2026, 11, 30, 1, 2, 3, 4000, time.UTC), "INFO", "request")
	l.str("s", "quote \" backslash \\ newline \n tab \t ctl \x01 é 日本")
	l.bytes("b", []byte("bad utf8 \xff\xfe ok"))
	l.int("n", -42)
	l.bool("ok", true)
	l.ms("d", 1234567*time.Nanosecond)
	l.end(&out)
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("log line is not JSON: %v\n%s", err, out.Bytes())
	}
	want := map[string]any{
		"time": "2026-11-30T01:02:03.000004Z", "level": "INFO", "msg": "request",
		"s": "quote \" backslash \\ newline \n tab \t ctl \x01 é 日本", "b": "bad utf8 \ufffd\ufffd ok",
		"n": float64(-42), "ok": true, "d": 1.234,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
	if out.Bytes()[out.Len()-1] != '\n' || bytes.Count(out.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("not exactly one line: %q", out.Bytes())
	}
}

func TestLogLineAllocs(t *testing.T) {
	model := []byte("gpt-4o-mini é")
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = appendJSONBytes(buf[:0], model) }); n != 0 {
		t.Fatalf("appendJSONBytes allocates %v times", n)
	}
}

// BenchmarkLogLine is one access log line as the gateway writes it for a
// routed request (`go test ./router -run '^$' -bench LogLine`).
func BenchmarkLogLine(b *testing.B) {
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		l := newLine(now, "INFO", "request")
		l.str("request_id", "3f2a9c0d1e7b-1a2b3c")
		l.str("path", "/v1/chat/completions")
		l.str("model", "gpt-4o-mini")
		l.str("pool", "bench")
		l.str("backend", "http://127.0.0.1:18000")
		l.str("route", "subjects")
		l.str("reason", "tier1_confident")
		l.int("status", 200)
		l.int("attempts", 1)
		l.ms("ttfb_ms", 1234567*time.Nanosecond)
		l.ms("duration_ms", 1334567*time.Nanosecond)
		l.int("bytes_out", 245)
		l.int("prompt_tokens", 12)
		l.int("completion_tokens", 2)
		l.end(io.Discard)
	}
}
