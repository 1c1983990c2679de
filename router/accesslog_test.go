package router

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
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

func TestAppendMillisMatchesAppendFloat(t *testing.T) {
	check := func(us int64) {
		t.Helper()
		want := strconv.AppendFloat(nil, float64(us)/1000, 'f', -1, 64)
		if got := appendMillis(nil, us); !bytes.Equal(got, want) {
			t.Fatalf("%d µs: %s, want %s", us, got, want)
		}
	}
	for us := int64(-3000); us <= 200_000; us++ {
		check(us)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		check(r.Int64N(1<<42) - 1<<41) // ±25 days
	}
}

// FuzzAppendJSON holds the access log's string encoder to encoding/json:
// the same string back as encoding/json's own encoding gives (each
// invalid byte as U+FFFD), and no bytes a JSON string may not hold.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{"", "gpt-4o-mini", "quote \" backslash \\ nl \n \x01 é 日本", "bad \xff\xfe", "\xef\xbf\xbd", "a\xe6\x97"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString([]byte("x"), s)[1:]
		if !bytes.Equal(appendJSONBytes(nil, []byte(s)), out) {
			t.Fatal("string and []byte forms differ")
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		// encoding/json writes each invalid byte as U+FFFD too.
		ref, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(ref, &want); err != nil || got != want {
			t.Fatalf("%q -> %s -> %q, encoding/json: %s -> %q", s, out, got, ref, want)
		}
		for _, c := range out {
			if c < 0x20 {
				t.Fatalf("%q -> %s: raw control byte", s, out)
			}
		}
	})
}

func TestAppendStampMatchesRFC3339Nano(t *testing.T) {
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("", -7*3600), time.FixedZone("", 5*3600+45*60)}
	r := rand.New(rand.NewPCG(3, 4))
	base := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	var prev time.Time
	for i := range 200_000 {
		var at time.Time
		switch i % 4 {
		case 0: // the same second as the last, often: the cached form
			at = prev.Add(time.Duration(r.Int64N(int64(time.Second))))
		case 1:
			at = base.Add(time.Duration(r.Int64N(int64(400 * 24 * time.Hour))))
		case 2:
			at = base.Add(time.Duration(r.Int64N(1e6)) * time.Second) // whole seconds: no fraction
		default:
			at = time.Unix(r.Int64N(1<<37)-1<<36, r.Int64N(1e9)) // years far from now, some past 9999
		}
		at = at.In(zones[r.IntN(len(zones))])
		prev = at
		want := at.AppendFormat(nil, time.RFC3339Nano)
		if got := appendStamp(nil, at); !bytes.Equal(got, want) {
			t.Fatalf("%v: %s, want %s", at, got, want)
		}
	}
}

// FuzzJSONSpecial8 holds the word test to jsonPlain byte by byte.
func FuzzJSONSpecial8(f *testing.F) {
	f.Add(uint64(0x6f6c6c6568222020))
	f.Add(uint64(0x7e5c1f80ff20217f))
	f.Fuzz(func(t *testing.T, x uint64) {
		want := false
		for i := 0; i < 64; i += 8 {
			want = want || !jsonPlain[byte(x>>i)]
		}
		if got := jsonSpecial8(x); got != want {
			t.Fatalf("jsonSpecial8(%#016x) = %v, want %v", x, got, want)
		}
	})
}

// FuzzAppendFloat3 holds appendFloat3 to strconv for every float32.
func FuzzAppendFloat3(f *testing.F) {
	for _, v := range []float32{0, 0.0625, 0.1875, 0.0005, 0.0015, 0.9995, 0.99949, 1, 0.5, 1e-8, 123.4567, 1 << 20, float32(math.Inf(1)), float32(math.NaN())} {
		f.Add(math.Float32bits(v))
		f.Add(math.Float32bits(-v))
	}
	f.Add(uint32(1))          // the least subnormal
	f.Add(uint32(0x7f7fffff)) // the greatest finite
	f.Fuzz(func(t *testing.T, bits uint32) {
		v := math.Float32frombits(bits)
		want := strconv.AppendFloat(nil, float64(v), 'f', 3, 32)
		if got := appendFloat3(nil, v); string(got) != string(want) {
			t.Fatalf("appendFloat3(%v, bits %#08x) = %s, want %s", v, bits, got, want)
		}
	})
}

// TestAppendFloat3Ties: every float32 from 0 to 2 whose thousandths are
// an exact tie, and its neighbours, as strconv writes them.
func TestAppendFloat3Ties(t *testing.T) {
	for k := 1; k < 4000; k += 2 { // (k/2)/1000, exact in binary only when it is a multiple of 1/2^n
		v := float32(float64(k) / 2000)
		if float64(v) != float64(k)/2000 {
			continue
		}
		for _, w := range []float32{v, math.Nextafter32(v, 0), math.Nextafter32(v, 3)} {
			want := strconv.AppendFloat(nil, float64(w), 'f', 3, 32)
			if got := appendFloat3(nil, w); string(got) != string(want) {
				t.Errorf("appendFloat3(%v) = %s, want %s", w, got, want)
			}
		}
	}
}

// TestAppendFloat3Range: float32s spread over [0, 2^20) and their
// negatives, subnormals included, as strconv writes them.
func TestAppendFloat3Range(t *testing.T) {
	const top = 0x49800000 // 2^20's bits
	const step = 4099      // 600,000 values; an exhaustive run over all of them passed too
	var got, want []byte
	for bits := uint32(0); bits < top; bits += step {
		for _, b := range []uint32{bits, bits | 1<<31} {
			v := math.Float32frombits(b)
			got, want = appendFloat3(got[:0], v), strconv.AppendFloat(want[:0], float64(v), 'f', 3, 32)
			if string(got) != string(want) {
				t.Fatalf("appendFloat3(%v, bits %#08x) = %s, want %s", v, b, got, want)
			}
		}
	}
}
