package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

var headSeeds = []string{
	"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8080\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"model\":1}",
	"GET /v1/models?x=1&y=%20 HTTP/1.1\r\nHost: h\r\nAccept: a\r\naccept: b\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Y:  spaced value\t\r\nconnection: keep-alive, Close\r\n\r\n",
	"POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n",
	"POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET /a HTTP/1.0\r\nHost: h\r\n\r\n",
	"GET /a HTTP/1.1\nHost: h\n\n",
	"GET http://h/a HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nx_under_score: 1\r\nX-Stainless-OS: Linux\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nV: caf\xc3\xa9\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nV: a\x00b\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	"GET /a HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
	"POST /a HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\ntransfer-encoding: Chunked\r\n\r\n",
}

// FuzzParseHead checks the fast parser against net/http's: whatever it
// takes as plain, http.ReadRequest parses the same way.
func FuzzParseHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, st := parseHead(b)
		if st != headPlain {
			return
		}
		if n > len(b) || !bytes.HasSuffix(b[:n], []byte("\r\n\r\n")) {
			t.Fatalf("head length %d for %q", n, b)
		}
		want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:n])))
		if err != nil {
			t.Fatalf("parsed as plain, but net/http rejects %q: %v", b[:n], err)
		}
		got := map[string]any{
			"method": h.method, "path": h.path, "query": h.query, "host": h.host,
			"target": h.target, "length": h.length, "close": h.close, "header": h.header, "chunked": h.chunked,
		}
		if h.chunked {
			got["length"] = int64(-1)
		}
		exp := map[string]any{
			"method": want.Method, "path": want.URL.Path, "query": want.URL.RawQuery, "host": want.Host,
			"target": want.RequestURI, "length": want.ContentLength, "close": want.Close, "header": want.Header,
			"chunked": len(want.TransferEncoding) == 1 && want.TransferEncoding[0] == "chunked",
		}
		if len(want.Header) == 0 && len(h.header) == 0 {
			exp["header"] = h.header
		}
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("%q:\n fast     %v\n net/http %v", b[:n], got, exp)
		}
		// HeaderLines: the map's lines, in the head's order.
		lines := http.Header{}
		for i, k := range h.keys {
			if k != "" {
				lines[k] = append(lines[k], h.vals[i])
			}
		}
		if len(h.keys) != h.fields || len(h.vals) != h.fields || !reflect.DeepEqual(lines, h.header) && len(h.header) > 0 {
			t.Fatalf("%q: lines %q %q, header %v", b[:n], h.keys, h.vals, h.header)
		}
	})
}

func TestParseHeadStatuses(t *testing.T) {
	for i, s := range headSeeds {
		_, _, st := parseHead([]byte(s))
		want := []headStatus{headPlain, headPlain, headPlain, headPlain, headPlain, headNotPlain, headNotPlain,
			headNotPlain, headNotPlain, headPlain, headPlain, headPlain, headNotPlain, headNotPlain, headPlain, headIncomplete,
			headNotPlain, headNotPlain, headNotPlain, headPlain}[i]
		if st != want {
			t.Errorf("%q: status %d, want %d", s, st, want)
		}
	}
}

func BenchmarkParseHead(b *testing.B) {
	head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: OpenAI/Python 1.55.0\r\n" +
		"Accept: application/json\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-xyz\r\nContent-Length: 120\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, st := parseHead(head); st != headPlain {
			b.Fatal(st)
		}
	}
}

// FuzzHeadEnd holds headEnd's one pass to the plain reading: the first
// "\r\n\r\n", the CRLFs before it, and no LF without its CR up to it.
func FuzzHeadEnd(f *testing.F) {
	for _, s := range []string{"", "\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\r\nbody\n", "GET / HTTP/1.1\nHost: a\r\n\r\n", "POST / HTTP/1.1\r\nHost: a\r\n", "\r\n\r\r\n\r\n", "\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bareLF := func(b []byte) bool {
			for i, c := range b {
				if c == '\n' && (i == 0 || b[i-1] != '\r') {
					return true
				}
			}
			return false
		}
		wantEnd, wantLines, want := 0, 0, headIncomplete
		if e := bytes.Index(b, []byte("\r\n\r\n")); e < 0 {
			if bareLF(b) {
				want = headNotPlain
			}
		} else if bareLF(b[:e+4]) {
			want = headNotPlain
		} else {
			wantEnd, wantLines, want = e, bytes.Count(b[:e], []byte("\r\n")), headPlain
		}
		var lf lineEnds
		end, lines, st := headEnd(b, &lf)
		if end != wantEnd || lines != wantLines || st != want {
			t.Fatalf("%q: %d %d %v, want %d %d %v", b, end, lines, st, wantEnd, wantLines, want)
		}
		if st == headPlain { // the request line's end, then each header line's
			for k, from := 0, 0; k <= lines && k < len(lf); k++ {
				i := from + bytes.IndexByte(b[from:], '\n')
				if int(lf[k]) != i {
					t.Fatalf("%q: line %d ends at %d, headEnd says %d", b, k, i, lf[k])
				}
				from = i + 1
			}
		}
	})
}

// TestParseHeadManyLines: past the line ends headEnd keeps, parseHead
// finds them itself; the boundary and beyond parse as net/http parses.
func TestParseHeadManyLines(t *testing.T) {
	for _, n := range []int{1, 62, 63, 64, 65, 100} {
		var b strings.Builder
		b.WriteString("GET /a HTTP/1.1\r\nHost: h\r\n")
		for i := range n {
			fmt.Fprintf(&b, "X-H%d: v%d\r\n", i%40, i) // names repeat past 40
		}
		b.WriteString("\r\n")
		h, _, st := parseHead([]byte(b.String()))
		if st != headPlain {
			t.Fatalf("%d lines: status %v", n, st)
		}
		want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(h.header, want.Header) || len(h.keys) != n+1 || h.keys[n] != fmt.Sprintf("X-H%d", (n-1)%40) || h.vals[n] != fmt.Sprintf("v%d", n-1) {
			t.Fatalf("%d lines: header %v, last line %q: %q", n, h.header, h.keys[n], h.vals[n])
		}
	}
}
