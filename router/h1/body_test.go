package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// fastEcho is echo, and says whether the fast path served the request.
func fastEcho(w http.ResponseWriter, r *http.Request) {
	_, fast := w.(*response)
	w.Header().Set("X-Fast-Path", fmt.Sprint(fast))
	w.Header().Set("X-TE", strings.Join(r.TransferEncoding, ","))
	echo(w, r)
}

// Chunked request bodies and Expect: 100-continue (curl sends it for
// bodies over 1 KiB) stay on the fast path, and the connection serves the
// next request there too.
func TestChunkedAndExpectOnTheFastPath(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(fastEcho)})
	big := strings.Repeat("b", 3000)
	cases := []struct {
		name, req, want, te string
	}{
		{"chunked", "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", "abcde", "chunked"},
		{"chunked, extensions and trailers", "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n3;a=b\r\nabc\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n", "abc", "chunked"},
		{"chunked, large", fmt.Sprintf("POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big, len(big), big), big + big, "chunked"},
		{"expect, sent at once", "POST /v1/x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok", "ok", ""},
		{"expect and chunked", "POST /v1/x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "ok", "chunked"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, addr)
			for i := range 2 {
				io.WriteString(c, tc.req)
				resp, got := readResp(t, br, "POST")
				if resp.StatusCode != 200 || got != tc.want || resp.Header.Get("X-Fast-Path") != "true" || resp.Header.Get("X-TE") != tc.te || resp.Close {
					t.Fatalf("request %d: %d %.40q fast=%s te=%q close=%v", i, resp.StatusCode, got, resp.Header.Get("X-Fast-Path"), resp.Header.Get("X-TE"), resp.Close)
				}
			}
		})
	}
}

// A client that waits for 100 Continue gets it when the handler reads the
// body, and then the answer; a handler that answers without reading gets
// no 100 sent, and the connection closes after its answer (the body may
// or may not follow), as in net/http.
func TestExpectContinueWaits(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fastEcho(w, r)
	})})
	c, br := rawConn(t, addr)
	io.WriteString(c, "POST /v1/x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("interim: %q %v", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("interim head not ended: %q", blank)
	}
	io.WriteString(c, "hello")
	resp, got := readResp(t, br, "POST")
	if resp.StatusCode != 200 || got != "hello" || resp.Header.Get("X-Fast-Path") != "true" || resp.Close {
		t.Fatalf("%d %q %v", resp.StatusCode, got, resp.Header)
	}

	c2, br2 := rawConn(t, addr)
	io.WriteString(c2, "POST /refuse HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
	line, err = br2.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 401") {
		t.Fatalf("refusal: %q %v", line, err)
	}
	rest, _ := io.ReadAll(br2)
	if !bytes.Contains(rest, []byte("Connection: close")) {
		t.Fatalf("the connection stays open with the body unsent: %q", rest)
	}
}

// A broken chunked body fails the handler's read, and the connection is
// not reused.
func TestChunkedBodyErrors(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(fastEcho)})
	for _, req := range []string{
		"POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
		"POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: " + strings.Repeat("t", 5000) + "\r\n\r\n",
	} {
		c, br := rawConn(t, addr)
		io.WriteString(c, req)
		resp, _ := readResp(t, br, "POST")
		if resp.StatusCode != 400 || !resp.Close {
			t.Errorf("%.60q: %d close=%v", req, resp.StatusCode, resp.Close)
		}
	}
	// Cut mid-body: the handler sees an error, nothing is served.
	c, br := rawConn(t, addr)
	io.WriteString(c, "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
	c.(interface{ CloseWrite() error }).CloseWrite()
	resp, _ := readResp(t, br, "POST")
	if resp.StatusCode != 400 {
		t.Fatalf("cut body: %d", resp.StatusCode)
	}
}

// FuzzChunkedBody: the fast path decodes a chunked body as net/http's
// server does: the same bytes, or both refuse; only a trailer section
// may be refused where net/http takes it.
func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{"3\r\nabc\r\n0\r\n\r\n", "3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n", "0\r\n\r\n", "1\r\na\r\n", "zz\r\n", "3\r\nabc\n0\r\n\r\n", "0\r\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &conn{br: bufio.NewReaderSize(bytes.NewReader(in), bufSize)}
		b := &body{c: c, remain: -1}
		got, gotErr := io.ReadAll(b)
		req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"), bytes.NewReader(in))))
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := io.ReadAll(req.Body)
		if gotErr == errTrailer && wantErr == nil && bytes.Equal(got, want) {
			return // stricter about trailers than net/http (a body it takes whole first)
		}
		if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q:\n fast     %q %v\n net/http %q %v", in, got, gotErr, want, wantErr)
		}
		if gotErr == nil && !c.bodyDone.Load() {
			t.Fatalf("%q: read to the end but not done", in)
		}
	})
}
