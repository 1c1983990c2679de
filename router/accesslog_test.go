package router

import (
	"bytes"
	"encoding/json"
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
