package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/triagegw/triage/internal/testenv"
)

const testModel = "test-model"

func newSim(t *testing.T, o Options) (*Server, *httptest.Server) {
	t.Helper()
	if o.Model == "" {
		o.Model = testModel
	}
	s, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { s.Close() })
	return s, ts
}

func post(t *testing.T, ctx context.Context, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return b
}

// readEvents reads SSE "data:" payloads until EOF or error.
func readEvents(r io.Reader) ([]string, error) {
	br := bufio.NewReader(r)
	var events []string
	for {
		ev, err := readEvent(br)
		if err != nil {
			if err == io.EOF {
				return events, nil
			}
			return events, err
		}
		events = append(events, ev)
	}
}

// readEvent reads one "data: X\n\n" event and returns X.
func readEvent(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		if err == io.EOF && line != "" {
			return "", io.ErrUnexpectedEOF
		}
		return "", err
	}
	blank, err := br.ReadString('\n')
	if err != nil {
		if err == io.EOF {
			return "", io.ErrUnexpectedEOF
		}
		return "", err
	}
	if blank != "\n" {
		return "", errors.New("event not terminated by a blank line: " + blank)
	}
	data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
	if !ok {
		return "", errors.New("event without data prefix: " + line)
	}
	return data, nil
}

func waitStats(t *testing.T, s *Server, ok func(Stats) bool) Stats {
	t.Helper()
	var st Stats
	testenv.WaitWithin(t, 3*time.Second, "the stats' expected state", func() (bool, string) {
		st = s.Stats()
		return ok(st), fmt.Sprintf("%+v", st)
	})
	return st
}

func checkAPIError(t *testing.T, resp *http.Response, status int, typ, msgContains string) {
	t.Helper()
	body := readAll(t, resp)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, body)
	}
	if m["object"] != "error" || m["type"] != typ || m["code"] != float64(status) {
		t.Errorf("error body %s: want object=error type=%s code=%d", body, typ, status)
	}
	if v, ok := m["param"]; !ok || v != nil {
		t.Errorf("error body %s: want \"param\":null", body)
	}
	if msg, _ := m["message"].(string); !strings.Contains(msg, msgContains) {
		t.Errorf("message %q does not contain %q", msg, msgContains)
	}
}

const chatBody = `{"model":"test-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there world"}]}`

func TestNonStreaming(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		body       string
		object     string
		idPrefix   string
		promptToks int
	}{
		{"chat", "/v1/chat/completions", chatBody, "chat.completion", "chatcmpl-", 5},
		{"chat parts", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":[{"type":"text","text":"one two"},{"type":"text","text":"three"}]}]}`, "chat.completion", "chatcmpl-", 3},
		{"chat no model", "/v1/chat/completions", `{"messages":[{"role":"user","content":""}],"stream":false}`, "chat.completion", "chatcmpl-", 1},
		{"completion string", "/v1/completions", `{"model":"test-model","prompt":"a b c d"}`, "text_completion", "cmpl-", 4},
		{"completion array", "/v1/completions", `{"model":"test-model","prompt":["a b","c"]}`, "text_completion", "cmpl-", 3},
		{"completion token ids", "/v1/completions", `{"model":"test-model","prompt":[1,2,3,4,5,6]}`, "text_completion", "cmpl-", 6},
		{"completion token id lists", "/v1/completions", `{"model":"test-model","prompt":[[1,2],[3]]}`, "text_completion", "cmpl-", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newSim(t, Options{Name: "r1", Chunks: 5})
			resp := post(t, context.Background(), ts.URL+tc.path, tc.body, nil)
			body := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := resp.Header.Get("X-Sim-Replica"); got != "r1" {
				t.Errorf("X-Sim-Replica %q, want r1", got)
			}
			var out struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Created int64  `json:"created"`
				Model   string `json:"model"`
				Choices []struct {
					Index   int `json:"index"`
					Message *struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"message"`
					Text         *string `json:"text"`
					FinishReason string  `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
					TotalTokens      int `json:"total_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if out.ID != tc.idPrefix+"1" || out.Object != tc.object || out.Model != testModel {
				t.Errorf("id/object/model = %q/%q/%q", out.ID, out.Object, out.Model)
			}
			if d := time.Since(time.Unix(out.Created, 0)); d < -time.Minute || d > time.Minute {
				t.Errorf("created %d is not now", out.Created)
			}
			if len(out.Choices) != 1 || out.Choices[0].FinishReason != "stop" || out.Choices[0].Index != 0 {
				t.Fatalf("choices %+v", out.Choices)
			}
			const want = "[r1] lorem ipsum dolor sit"
			c := out.Choices[0]
			if tc.object == "chat.completion" {
				if c.Message == nil || c.Message.Role != "assistant" || c.Message.Content != want {
					t.Errorf("message %+v, want assistant %q", c.Message, want)
				}
			} else if c.Text == nil || *c.Text != want {
				t.Errorf("text %v, want %q", c.Text, want)
			}
			if out.Usage.PromptTokens != tc.promptToks || out.Usage.CompletionTokens != 5 || out.Usage.TotalTokens != tc.promptToks+5 {
				t.Errorf("usage %+v, want prompt %d completion 5", out.Usage, tc.promptToks)
			}
			st := s.Stats()
			if st != (Stats{Requests: 1, Completed: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

type streamChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestStreaming(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		body   string
		chat   bool
		chunks int
	}{
		{"chat default chunks", "/v1/chat/completions", `{"model":"test-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi you"}]}`, true, 16},
		{"chat 3 chunks", "/v1/chat/completions", `{"model":"test-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi you"}]}`, true, 3},
		{"completion", "/v1/completions", `{"model":"test-model","stream":true,"stream_options":{"include_usage":true},"prompt":"hi you"}`, false, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Name: "rep"}
			if tc.chunks != 16 {
				o.Chunks = tc.chunks
			}
			s, ts := newSim(t, o)
			resp := post(t, context.Background(), ts.URL+tc.path, tc.body, nil)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
				t.Errorf("Transfer-Encoding %v, want chunked", resp.TransferEncoding)
			}
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatalf("reading stream: %v (events %q)", err, events)
			}
			want := tc.chunks + 3 // content + finish + usage + [DONE]
			if tc.chat {
				want++ // role chunk
			}
			if len(events) != want {
				t.Fatalf("%d events, want %d: %q", len(events), want, events)
			}
			if events[len(events)-1] != "[DONE]" {
				t.Fatalf("last event %q, want [DONE]", events[len(events)-1])
			}
			chunks := make([]streamChunk, len(events)-1)
			for i, ev := range events[:len(events)-1] {
				if err := json.Unmarshal([]byte(ev), &chunks[i]); err != nil {
					t.Fatalf("event %d %q: %v", i, ev, err)
				}
				c := chunks[i]
				wantObj := "text_completion"
				if tc.chat {
					wantObj = "chat.completion.chunk"
				}
				if c.Object != wantObj || c.ID != chunks[0].ID || c.Model != testModel {
					t.Errorf("event %d: object %q id %q model %q", i, c.Object, c.ID, c.Model)
				}
			}
			if tc.chat {
				first := chunks[0]
				if len(first.Choices) != 1 || first.Choices[0].Delta == nil || first.Choices[0].Delta.Role == nil ||
					*first.Choices[0].Delta.Role != "assistant" || first.Choices[0].Delta.Content == nil || *first.Choices[0].Delta.Content != "" {
					t.Errorf("first chunk %s, want delta {role:assistant, content:\"\"}", events[0])
				}
				chunks = chunks[1:]
			}
			var text strings.Builder
			for i, c := range chunks[:tc.chunks] {
				if len(c.Choices) != 1 || c.Choices[0].FinishReason != nil {
					t.Fatalf("content chunk %d: %+v", i, c)
				}
				if tc.chat {
					if c.Choices[0].Delta == nil || c.Choices[0].Delta.Content == nil || c.Choices[0].Delta.Role != nil {
						t.Fatalf("content chunk %d has delta %+v", i, c.Choices[0].Delta)
					}
					text.WriteString(*c.Choices[0].Delta.Content)
				} else {
					if c.Choices[0].Text == nil {
						t.Fatalf("content chunk %d without text", i)
					}
					text.WriteString(*c.Choices[0].Text)
				}
			}
			if !strings.HasPrefix(text.String(), "[rep] lorem ") || len(strings.Fields(text.String())) != tc.chunks {
				t.Errorf("streamed text %q", text.String())
			}
			fin := chunks[tc.chunks]
			if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" || fin.Usage != nil {
				t.Errorf("finish chunk %+v", fin)
			}
			if tc.chat && (fin.Choices[0].Delta == nil || fin.Choices[0].Delta.Content != nil || fin.Choices[0].Delta.Role != nil) {
				t.Errorf("finish chunk delta %+v, want {}", fin.Choices[0].Delta)
			}
			usageEv := events[len(events)-2]
			if !strings.Contains(usageEv, `"choices":[]`) {
				t.Errorf("usage chunk %s lacks \"choices\":[]", usageEv)
			}
			u := chunks[tc.chunks+1].Usage
			if u == nil || u.PromptTokens != 2 || u.CompletionTokens != tc.chunks || u.TotalTokens != 2+tc.chunks {
				t.Errorf("usage chunk %s", usageEv)
			}
			if st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 }); st != (Stats{Requests: 1, Completed: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestStreamMatchesJSON checks the streamed pieces concatenate to the
// non-streamed content.
func TestStreamMatchesJSON(t *testing.T) {
	_, ts := newSim(t, Options{Chunks: 7})
	resp := post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x"}`, nil)
	var out struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	if err := json.Unmarshal(readAll(t, resp), &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("%v %+v", err, out)
	}
	resp = post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x","stream":true}`, nil)
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, ev := range events[:7] {
		var c streamChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(*c.Choices[0].Text)
	}
	if text.String() != out.Choices[0].Text {
		t.Errorf("stream %q != json %q", text.String(), out.Choices[0].Text)
	}
}

func TestStreamFlushesEachChunk(t *testing.T) {
	s, ts := newSim(t, Options{Chunks: 4, ChunkDelay: 150 * time.Millisecond})
	start := time.Now()
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, nil)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i, want := range []string{`"role":"assistant"`, `"content":"[test-model] "`, `"content":"lorem "`} {
		ev, err := readEvent(br)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !strings.Contains(ev, want) {
			t.Fatalf("event %d %s lacks %s", i, ev, want)
		}
		// The stream is still in progress: the event arrived because it was
		// flushed, not because the handler finished.
		if st := s.Stats(); st.Active != 1 || st.Completed != 0 {
			t.Fatalf("after event %d (%v): stats %+v, want stream in progress", i, time.Since(start), st)
		}
	}
	rest, err := readEvents(br)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 5 || rest[4] != "[DONE]" { // 2 content, finish, usage, [DONE]
		t.Fatalf("rest %q", rest)
	}
	if el := time.Since(start); el < 4*150*time.Millisecond {
		t.Errorf("stream took %v, want >= 4 chunk delays", el)
	}
	waitStats(t, s, func(st Stats) bool { return st.Completed == 1 && st.Active == 0 })
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		status  int
		typ     string
		message string
	}{
		{"model mismatch chat", "POST", "/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`, 404, "NotFoundError", "The model `other` does not exist."},
		{"model mismatch completions", "POST", "/v1/completions", `{"model":"other","prompt":"x"}`, 404, "NotFoundError", "The model `other` does not exist."},
		{"model mismatch embeddings", "POST", "/v1/embeddings", `{"model":"other","input":"x"}`, 404, "NotFoundError", "The model `other` does not exist."},
		{"malformed json", "POST", "/v1/chat/completions", `{"model":`, 400, "BadRequestError", "invalid JSON"},
		{"malformed json completions", "POST", "/v1/completions", `nope`, 400, "BadRequestError", "invalid JSON"},
		{"wrong type", "POST", "/v1/chat/completions", `{"messages":"hi"}`, 400, "BadRequestError", "invalid JSON"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"test-model"}`, 400, "BadRequestError", "messages"},
		{"empty messages", "POST", "/v1/chat/completions", `{"model":"test-model","messages":[]}`, 400, "BadRequestError", "messages"},
		{"bad content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "BadRequestError", "content"},
		{"missing prompt", "POST", "/v1/completions", `{"model":"test-model"}`, 400, "BadRequestError", "prompt"},
		{"null prompt", "POST", "/v1/completions", `{"prompt":null}`, 400, "BadRequestError", "prompt"},
		{"empty prompt array", "POST", "/v1/completions", `{"prompt":[]}`, 400, "BadRequestError", "prompt"},
		{"bad prompt", "POST", "/v1/completions", `{"prompt":{"a":1}}`, 400, "BadRequestError", "prompt"},
		{"missing input", "POST", "/v1/embeddings", `{"model":"test-model"}`, 400, "BadRequestError", "input"},
		{"bad encoding", "POST", "/v1/embeddings", `{"input":"x","encoding_format":"int8"}`, 400, "BadRequestError", "encoding_format"},
		{"unknown path", "GET", "/v2/nothing", ``, 404, "NotFoundError", "/v2/nothing"},
		{"unknown post path", "POST", "/v1/chat/completions/", `{}`, 404, "NotFoundError", "Not Found"},
		{"GET on chat", "GET", "/v1/chat/completions", ``, 405, "MethodNotAllowedError", "Method Not Allowed"},
		{"POST on health", "POST", "/health", ``, 405, "MethodNotAllowedError", "Method Not Allowed"},
		{"DELETE on models", "DELETE", "/v1/models", ``, 405, "MethodNotAllowedError", "Method Not Allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newSim(t, Options{})
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Errorf("405 without Allow header")
			}
			checkAPIError(t, resp, tc.status, tc.typ, tc.message)
			st := s.Stats()
			if st.Completed != 0 || st.Active != 0 || st.Injected != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestInjectedErrors(t *testing.T) {
	tests := []struct {
		name   string
		opt    Options
		status int
		typ    string
	}{
		{"default status", Options{ErrorRate: 1}, 500, "InternalServerError"},
		{"503", Options{ErrorRate: 1, ErrorStatus: 503}, 503, "ServiceUnavailableError"},
		{"429", Options{ErrorRate: 1, ErrorStatus: 429}, 429, "RateLimitError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Latency = 5 * time.Second // injected errors do not wait
			s, ts := newSim(t, tc.opt)
			for _, stream := range []string{"false", "true"} {
				start := time.Now()
				resp := post(t, context.Background(), ts.URL+"/v1/chat/completions",
					`{"stream":`+stream+`,"messages":[{"role":"user","content":"x"}]}`, nil)
				checkAPIError(t, resp, tc.status, tc.typ, "injected")
				if el := time.Since(start); el > 2*time.Second {
					t.Errorf("injected error took %v", el)
				}
			}
			resp := post(t, context.Background(), ts.URL+"/v1/embeddings", `{"input":"x"}`, nil)
			checkAPIError(t, resp, tc.status, tc.typ, "injected")
			if st := s.Stats(); st != (Stats{Requests: 3, Injected: 3}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestErrorRateDeterministic(t *testing.T) {
	run := func(seed int64) []int {
		_, ts := newSim(t, Options{ErrorRate: 0.5, Seed: seed, Chunks: 1})
		var codes []int
		for range 40 {
			resp := post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x"}`, nil)
			readAll(t, resp)
			codes = append(codes, resp.StatusCode)
		}
		return codes
	}
	a, b := run(7), run(7)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different outcomes:\n%v\n%v", a, b)
	}
	n500 := 0
	for _, c := range a {
		if c == 500 {
			n500++
		} else if c != 200 {
			t.Fatalf("unexpected status %d", c)
		}
	}
	if n500 == 0 || n500 == len(a) {
		t.Errorf("error rate 0.5 gave %d/%d errors", n500, len(a))
	}
	if c := run(8); reflect.DeepEqual(a, c) {
		t.Errorf("seeds 7 and 8 gave identical sequences %v", a)
	}
}

func TestDropRate(t *testing.T) {
	s, ts := newSim(t, Options{DropRate: 1, Chunks: 6})
	for i, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"stream":true,"prompt":"x","messages":[{"role":"user","content":"x"}]}`
		resp := post(t, context.Background(), ts.URL+path, body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s: read error %v, want io.ErrUnexpectedEOF", path, err)
		}
		if bytes.Contains(raw, []byte("[DONE]")) || bytes.Contains(raw, []byte(`"finish_reason":"stop"`)) {
			t.Errorf("%s: truncated body contains the end of stream: %s", path, raw)
		}
		if n := bytes.Count(raw, []byte("data: ")); n == 0 {
			t.Errorf("%s: no chunk before the drop", path)
		}
		// Drops happen after Chunks/2 content chunks.
		if !bytes.Contains(raw, []byte("ipsum")) || bytes.Contains(raw, []byte("dolor")) {
			t.Errorf("%s: want exactly 3 content chunks, got %s", path, raw)
		}
		waitStats(t, s, func(st Stats) bool { return st.Dropped == int64(i+1) && st.Active == 0 })
	}
	// Non-streamed replies are never dropped.
	resp := post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x"}`, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"finish_reason":"stop"`)) {
		t.Errorf("non-stream reply %d %s", resp.StatusCode, b)
	}
	if st := s.Stats(); st != (Stats{Requests: 3, Completed: 1, Dropped: 2}) {
		t.Errorf("stats %+v", st)
	}
}

func TestHeaderOverrides(t *testing.T) {
	const streamChat = `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`
	const jsonChat = `{"messages":[{"role":"user","content":"x"}]}`
	tests := []struct {
		name    string
		body    string
		hdr     map[string]string
		check   func(t *testing.T, resp *http.Response, elapsed time.Duration)
		wantSts Stats
	}{
		{
			name: "latency", body: jsonChat, hdr: map[string]string{"X-Sim-Latency": "120ms"},
			check: func(t *testing.T, resp *http.Response, el time.Duration) {
				readAll(t, resp)
				if resp.StatusCode != 200 || el < 120*time.Millisecond {
					t.Errorf("status %d after %v, want 200 after >= 120ms", resp.StatusCode, el)
				}
			},
			wantSts: Stats{Requests: 1, Completed: 1},
		},
		{
			name: "chunks json", body: jsonChat, hdr: map[string]string{"X-Sim-Chunks": "2"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				b := readAll(t, resp)
				if !bytes.Contains(b, []byte(`"content":"[test-model] lorem"`)) || !bytes.Contains(b, []byte(`"completion_tokens":2`)) {
					t.Errorf("body %s", b)
				}
			},
			wantSts: Stats{Requests: 1, Completed: 1},
		},
		{
			name: "chunks and delay stream", body: streamChat, hdr: map[string]string{"X-Sim-Chunks": "3", "X-Sim-Chunk-Delay": "40ms"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				start := time.Now()
				defer resp.Body.Close()
				ev, err := readEvents(resp.Body)
				if err != nil || len(ev) != 7 { // role + 3 + finish + usage + DONE
					t.Errorf("events %q err %v", ev, err)
				}
				if el := time.Since(start); el < 100*time.Millisecond {
					t.Errorf("stream took %v, want >= 3*40ms", el)
				}
			},
			wantSts: Stats{Requests: 1, Completed: 1},
		},
		{
			name: "status", body: jsonChat, hdr: map[string]string{"X-Sim-Status": "429"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				checkAPIError(t, resp, 429, "RateLimitError", "X-Sim-Status")
			},
			wantSts: Stats{Requests: 1, Injected: 1},
		},
		{
			name: "status beats invalid body", body: `{`, hdr: map[string]string{"X-Sim-Status": "502"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				checkAPIError(t, resp, 502, "BadGatewayError", "injected")
			},
			wantSts: Stats{Requests: 1, Injected: 1},
		},
		{
			name: "drop after", body: streamChat, hdr: map[string]string{"X-Sim-Drop-After": "2"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				defer resp.Body.Close()
				ev, err := readEvents(resp.Body)
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("err %v, want io.ErrUnexpectedEOF", err)
				}
				if len(ev) != 3 { // role + 2 content
					t.Errorf("events %q, want role + 2 content chunks", ev)
				}
			},
			wantSts: Stats{Requests: 1, Dropped: 1},
		},
		{
			name: "drop after 0", body: streamChat, hdr: map[string]string{"X-Sim-Drop-After": "0"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				defer resp.Body.Close()
				ev, err := readEvents(resp.Body)
				if !errors.Is(err, io.ErrUnexpectedEOF) || len(ev) != 1 {
					t.Errorf("events %q err %v, want only the role chunk then a truncation", ev, err)
				}
			},
			wantSts: Stats{Requests: 1, Dropped: 1},
		},
		{
			name: "drop after beyond chunks", body: streamChat, hdr: map[string]string{"X-Sim-Drop-After": "99", "X-Sim-Chunks": "2"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				defer resp.Body.Close()
				ev, err := readEvents(resp.Body)
				if !errors.Is(err, io.ErrUnexpectedEOF) || len(ev) != 3 {
					t.Errorf("events %q err %v, want role + 2 content then truncation", ev, err)
				}
			},
			wantSts: Stats{Requests: 1, Dropped: 1},
		},
		{
			name: "drop after ignored for json", body: jsonChat, hdr: map[string]string{"X-Sim-Drop-After": "1"},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				if b := readAll(t, resp); resp.StatusCode != 200 {
					t.Errorf("status %d %s", resp.StatusCode, b)
				}
			},
			wantSts: Stats{Requests: 1, Completed: 1},
		},
	}
	invalid := map[string]string{
		"X-Sim-Latency":     "soon",
		"X-Sim-Chunks":      "many",
		"X-Sim-Chunk-Delay": "-5ms",
		"X-Sim-Status":      "200",
		"X-Sim-Drop-After":  "-1",
		"X-Sim-Fault":       "meltdown",
	}
	for h, v := range invalid {
		tests = append(tests, struct {
			name    string
			body    string
			hdr     map[string]string
			check   func(t *testing.T, resp *http.Response, elapsed time.Duration)
			wantSts Stats
		}{
			name: "invalid " + h, body: jsonChat, hdr: map[string]string{h: v},
			check: func(t *testing.T, resp *http.Response, _ time.Duration) {
				checkAPIError(t, resp, 400, "BadRequestError", h)
			},
			wantSts: Stats{Requests: 1},
		})
	}
	tests = append(tests, struct {
		name    string
		body    string
		hdr     map[string]string
		check   func(t *testing.T, resp *http.Response, elapsed time.Duration)
		wantSts Stats
	}{
		name: "invalid X-Sim-Chunks zero", body: jsonChat, hdr: map[string]string{"X-Sim-Chunks": "0"},
		check: func(t *testing.T, resp *http.Response, _ time.Duration) {
			checkAPIError(t, resp, 400, "BadRequestError", "X-Sim-Chunks")
		},
		wantSts: Stats{Requests: 1},
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newSim(t, Options{Chunks: 5})
			start := time.Now()
			resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", tc.body, tc.hdr)
			tc.check(t, resp, time.Since(start))
			if st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 }); st != tc.wantSts {
				t.Errorf("stats %+v, want %+v", st, tc.wantSts)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	s, ts := newSim(t, Options{})
	steps := []struct {
		set    *bool
		status int
	}{
		{nil, 200},
		{ptr(false), 503},
		{ptr(false), 503},
		{ptr(true), 200},
	}
	for i, st := range steps {
		if st.set != nil {
			s.SetHealthy(*st.set)
		}
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != st.status || len(b) != 0 {
			t.Errorf("step %d: status %d body %q, want %d and empty body", i, resp.StatusCode, b, st.status)
		}
	}
	if st := s.Stats(); st.Requests != 0 {
		t.Errorf("GETs counted as requests: %+v", st)
	}
}

func ptr[T any](v T) *T { return &v }

func TestModels(t *testing.T) {
	before := time.Now().Unix()
	_, ts := newSim(t, Options{Model: "org/llama-3"})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			Created     int64  `json:"created"`
			OwnedBy     string `json:"owned_by"`
			Root        string `json:"root"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "list" || len(out.Data) != 1 {
		t.Fatalf("models %s", b)
	}
	m := out.Data[0]
	if m.ID != "org/llama-3" || m.Object != "model" || m.OwnedBy != "vllm" || m.Root != "org/llama-3" || m.MaxModelLen != 8192 {
		t.Errorf("model card %s", b)
	}
	if m.Created < before || m.Created > time.Now().Unix() {
		t.Errorf("created %d not the start time", m.Created)
	}
}

type embeddingsOut struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func getEmbeddings(t *testing.T, url, body string) embeddingsOut {
	t.Helper()
	resp := post(t, context.Background(), url+"/v1/embeddings", body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out embeddingsOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Object != "list" || out.Model != testModel {
		t.Fatalf("embeddings reply %s", b)
	}
	return out
}

func floats(t *testing.T, raw json.RawMessage) []float64 {
	t.Helper()
	var v []float64
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("embedding %s: %v", raw, err)
	}
	return v
}

func TestEmbeddings(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		dims   int
		n      int
		tokens int
	}{
		{"string", `{"model":"test-model","input":"hello world"}`, 16, 1, 2},
		{"strings", `{"input":["hello world","a","b c d"]}`, 16, 3, 6},
		{"token ids", `{"input":[5,6,7]}`, 8, 1, 3},
		{"token id lists", `{"input":[[5,6,7],[1]]}`, 32, 2, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ts := newSim(t, Options{EmbeddingDims: tc.dims})
			out := getEmbeddings(t, ts.URL, tc.body)
			if len(out.Data) != tc.n || out.Usage.PromptTokens != tc.tokens || out.Usage.TotalTokens != tc.tokens {
				t.Fatalf("got %d vectors usage %+v, want %d and %d tokens", len(out.Data), out.Usage, tc.n, tc.tokens)
			}
			for i, d := range out.Data {
				if d.Object != "embedding" || d.Index != i {
					t.Errorf("data[%d] object %q index %d", i, d.Object, d.Index)
				}
				v := floats(t, d.Embedding)
				if len(v) != tc.dims {
					t.Errorf("data[%d] has %d dims, want %d", i, len(v), tc.dims)
				}
				var norm float64
				for _, f := range v {
					norm += f * f
				}
				if math.Abs(math.Sqrt(norm)-1) > 1e-5 {
					t.Errorf("data[%d] norm %v, want 1", i, math.Sqrt(norm))
				}
			}
			// Deterministic: same request, other replica with the same dims.
			_, ts2 := newSim(t, Options{EmbeddingDims: tc.dims, Seed: 99})
			again := getEmbeddings(t, ts2.URL, tc.body)
			for i := range out.Data {
				if !reflect.DeepEqual(floats(t, out.Data[i].Embedding), floats(t, again.Data[i].Embedding)) {
					t.Errorf("data[%d] differs between calls", i)
				}
			}
		})
	}

	_, ts := newSim(t, Options{})
	out := getEmbeddings(t, ts.URL, `{"input":["alpha","beta","alpha"]}`)
	a, b, c := floats(t, out.Data[0].Embedding), floats(t, out.Data[1].Embedding), floats(t, out.Data[2].Embedding)
	if reflect.DeepEqual(a, b) {
		t.Errorf("different inputs gave the same vector")
	}
	if !reflect.DeepEqual(a, c) {
		t.Errorf("same input gave different vectors")
	}

	// base64: little-endian float32s equal to the float reply.
	out64 := getEmbeddings(t, ts.URL, `{"input":"alpha","encoding_format":"base64"}`)
	var s64 string
	if err := json.Unmarshal(out64.Data[0].Embedding, &s64); err != nil {
		t.Fatalf("base64 embedding %s: %v", out64.Data[0].Embedding, err)
	}
	raw, err := base64.StdEncoding.DecodeString(s64)
	if err != nil || len(raw) != 4*16 {
		t.Fatalf("base64 decode: %v len %d", err, len(raw))
	}
	for i := range 16 {
		f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if float64(f) != float64(float32(a[i])) {
			t.Errorf("base64 dim %d = %v, float reply %v", i, f, a[i])
		}
	}
}

func TestClientCancelMidStream(t *testing.T) {
	s, ts := newSim(t, Options{Chunks: 100, ChunkDelay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, ts.URL+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	br := bufio.NewReader(resp.Body)
	if _, err := readEvent(br); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	start := time.Now()
	st := waitStats(t, s, func(st Stats) bool { return st.Cancelled == 1 && st.Active == 0 })
	if st.Completed != 0 || st.Dropped != 0 || st.Requests != 1 {
		t.Errorf("stats %+v", st)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("handler took %v to notice the cancel", el)
	}
}

func TestClientCancelDuringLatency(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		t.Run(path, func(t *testing.T) {
			s, ts := newSim(t, Options{Latency: 10 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path,
				strings.NewReader(`{"input":"x","messages":[{"role":"user","content":"x"}]}`))
			start := time.Now()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("request succeeded with status %d despite the 10s latency", resp.StatusCode)
			}
			st := waitStats(t, s, func(st Stats) bool { return st.Cancelled == 1 && st.Active == 0 })
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("handler returned after %v", el)
			}
			if st.Completed != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestLatencyOption(t *testing.T) {
	_, ts := newSim(t, Options{Latency: 100 * time.Millisecond, Chunks: 2})
	start := time.Now()
	resp := post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x","stream":true}`, nil)
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("stream headers after %v, want >= 100ms", el)
	}
	if _, err := readEvents(resp.Body); err != nil {
		t.Error(err)
	}
	resp.Body.Close()
}

func TestLastRequest(t *testing.T) {
	s, ts := newSim(t, Options{})
	if got := s.LastRequest(); got.Path != "" || got.Body != nil || got.Header != nil {
		t.Errorf("LastRequest before any request = %+v", got)
	}
	body := `{"model":"test-model","messages":[{"role":"user","content":"remember me"}]}`
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", body, map[string]string{"X-Trace": "abc-123"})
	readAll(t, resp)
	// GETs are not recorded.
	r2, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r2)
	got := s.LastRequest()
	if got.Path != "/v1/chat/completions" || string(got.Body) != body || got.Header.Get("X-Trace") != "abc-123" ||
		got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("LastRequest = %q %q %v", got.Path, got.Body, got.Header)
	}
	// The copy is the caller's own.
	got.Header.Set("X-Trace", "changed")
	got.Body[0] = 'X'
	if again := s.LastRequest(); again.Header.Get("X-Trace") != "abc-123" || string(again.Body) != body {
		t.Errorf("mutating the returned Recorded changed the stored one")
	}
	// Invalid requests are recorded too.
	resp = post(t, context.Background(), ts.URL+"/v1/embeddings", `{bad`, nil)
	readAll(t, resp)
	if got := s.LastRequest(); got.Path != "/v1/embeddings" || string(got.Body) != `{bad` {
		t.Errorf("LastRequest after invalid = %q %q", got.Path, got.Body)
	}
}

func TestRegisterFlags(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	o.RegisterFlags(fs)
	for _, name := range []string{"model", "name", "latency", "chunks", "chunk-delay", "error-rate", "error-status", "drop-rate", "fault", "fault-rate", "embedding-dims", "seed", "api", "api-key"} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag -%s not registered", name)
			continue
		}
		if !strings.Contains(f.Usage, "default") {
			t.Errorf("flag -%s usage %q does not state the default", name, f.Usage)
		}
	}
	err := fs.Parse([]string{
		"-model", "m1", "-name", "r7", "-latency", "15ms", "-chunks", "4", "-chunk-delay", "2ms",
		"-error-rate", "0.25", "-error-status", "503", "-drop-rate", "0.5", "-fault", "extra-crlf", "-fault-rate", "0.125",
		"-embedding-dims", "8", "-seed", "42", "-api", "anthropic", "-api-key", "sk-ant",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Model: "m1", Name: "r7", Latency: 15 * time.Millisecond, Chunks: 4, ChunkDelay: 2 * time.Millisecond,
		ErrorRate: 0.25, ErrorStatus: 503, DropRate: 0.5, Fault: "extra-crlf", FaultRate: 0.125, EmbeddingDims: 8, Seed: 42,
		API: "anthropic", APIKey: "sk-ant"}
	if o != want {
		t.Errorf("parsed %+v\nwant   %+v", o, want)
	}
	if _, err := New(o); err != nil {
		t.Errorf("New(parsed): %v", err)
	}

	// Unset flags keep zero values, which New turns into the defaults.
	var d Options
	fs = flag.NewFlagSet("sim", flag.ContinueOnError)
	d.RegisterFlags(fs)
	if err := fs.Parse([]string{"-model", "only"}); err != nil {
		t.Fatal(err)
	}
	if d != (Options{Model: "only"}) {
		t.Errorf("defaults parsed to %+v", d)
	}
	s, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	if s.opt.Name != "only" || s.opt.Chunks != 16 || s.opt.ErrorStatus != 500 || s.opt.EmbeddingDims != 16 || s.opt.Seed != 1 || s.opt.API != "openai" {
		t.Errorf("defaults applied: %+v", s.opt)
	}

	fs = flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	(&Options{}).RegisterFlags(fs)
	if err := fs.Parse([]string{"-latency", "fast"}); err == nil {
		t.Errorf("bad duration accepted")
	}
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		ok   bool
	}{
		{"minimal", Options{Model: "m"}, true},
		{"full", Options{Model: "m", ErrorRate: 1, DropRate: 0, ErrorStatus: 599, Chunks: 1}, true},
		{"no model", Options{}, false},
		{"blank model", Options{Model: "  "}, false},
		{"error rate high", Options{Model: "m", ErrorRate: 1.5}, false},
		{"error rate negative", Options{Model: "m", ErrorRate: -0.1}, false},
		{"error rate NaN", Options{Model: "m", ErrorRate: math.NaN()}, false},
		{"drop rate high", Options{Model: "m", DropRate: 2}, false},
		{"chunks negative", Options{Model: "m", Chunks: -1}, false},
		{"status low", Options{Model: "m", ErrorStatus: 200}, false},
		{"status high", Options{Model: "m", ErrorStatus: 600}, false},
		{"negative latency", Options{Model: "m", Latency: -time.Second}, false},
		{"negative chunk delay", Options{Model: "m", ChunkDelay: -time.Second}, false},
		{"negative dims", Options{Model: "m", EmbeddingDims: -3}, false},
		{"fault", Options{Model: "m", Fault: FaultGarbage, FaultRate: 0.5}, true},
		{"fault without rate", Options{Model: "m", Fault: FaultHang}, true},
		{"unknown fault", Options{Model: "m", Fault: "meltdown", FaultRate: 0.1}, false},
		{"fault rate without fault", Options{Model: "m", FaultRate: 0.1}, false},
		{"fault rate high", Options{Model: "m", Fault: FaultGarbage, FaultRate: 1.5}, false},
		{"fault rate NaN", Options{Model: "m", Fault: FaultGarbage, FaultRate: math.NaN()}, false},
		{"api openai", Options{Model: "m", API: APIOpenAI}, true},
		{"api anthropic", Options{Model: "m", API: APIAnthropic, APIKey: "k"}, true},
		{"unknown api", Options{Model: "m", API: "gemini"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opt)
			if tc.ok != (err == nil) || (err == nil) != (s != nil) {
				t.Errorf("New(%+v) = %v, %v; want ok=%v", tc.opt, s, err, tc.ok)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	s, ts := newSim(t, Options{Chunks: 3, ErrorRate: 0.3})
	const n = 40
	done := make(chan int, n)
	for i := range n {
		go func() {
			body := `{"messages":[{"role":"user","content":"x"}],"stream":` + map[bool]string{true: "true", false: "false"}[i%2 == 0] + `}`
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.Stats()
			s.LastRequest()
			done <- resp.StatusCode
		}()
	}
	ok := 0
	for range n {
		switch <-done {
		case 200:
			ok++
		case 500:
		default:
			t.Error("unexpected outcome")
		}
	}
	st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 })
	if st.Requests != n || st.Completed != int64(ok) || st.Injected != int64(n-ok) {
		t.Errorf("stats %+v with %d ok", st, ok)
	}
}

func BenchmarkChatJSON(b *testing.B) {
	s, err := New(Options{Model: testModel})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(chatBody)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		s.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}

// ---- wire-level faults, seen by a raw TCP client ----

// dialRaw opens a plain TCP connection to ts.
func dialRaw(t *testing.T, ts *httptest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawPost formats a POST request with the given extra header lines.
func rawPost(path, body string, header ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, len(body))
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// readWire reads what the server sends until it closes the connection
// (closed; err says how: nil for a FIN, the reset error for an RST) or
// stays silent for quiet.
func readWire(t *testing.T, c net.Conn, quiet time.Duration) (wire []byte, closed bool, err error) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		wire = append(wire, buf[:n]...)
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			_ = c.SetReadDeadline(time.Time{})
			return wire, false, nil
		case errors.Is(err, io.EOF):
			return wire, true, nil
		default:
			return wire, true, err
		}
	}
}

// cutResponse splits the response at the start of wire into its head lines
// (status line first) and its Content-Length body; rest is what follows.
func cutResponse(t *testing.T, wire []byte) (head []string, body, rest []byte) {
	t.Helper()
	h, after, ok := bytes.Cut(wire, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("no complete response head in %q", wire)
	}
	head = strings.Split(string(h), "\r\n")
	n := 0
	for _, line := range head[1:] {
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			var err error
			if n, err = strconv.Atoi(v); err != nil {
				t.Fatalf("Content-Length %q", v)
			}
		}
	}
	if n > len(after) {
		t.Fatalf("body of %d bytes declared, %d sent: %q", n, len(after), wire)
	}
	return head, after[:n], after[n:]
}

// answerHead is the head of a fault's valid answer (or leaked response).
func answerHead(contentType string, n int) []string {
	return []string{"HTTP/1.1 200 OK", "Content-Type: " + contentType, "Content-Length: " + strconv.Itoa(n), "X-Sim-Replica: r1"}
}

// checkAnswer checks a fault's valid answer to a chat request of replica
// r1 with 3 chunks: the JSON completion, or the whole event stream.
func checkAnswer(t *testing.T, head []string, body []byte, stream bool) {
	t.Helper()
	ct := "application/json"
	if stream {
		ct = "text/event-stream; charset=utf-8"
	}
	if want := answerHead(ct, len(body)); !reflect.DeepEqual(head, want) {
		t.Fatalf("answer head %q, want %q", head, want)
	}
	const want = "[r1] lorem ipsum"
	if !stream {
		var out struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.Object != "chat.completion" || len(out.Choices) != 1 || out.Choices[0].Message.Content != want {
			t.Fatalf("answer body %s (%v), want a chat.completion saying %q", body, err, want)
		}
		return
	}
	events, err := readEvents(bytes.NewReader(body))
	if err != nil || len(events) != 7 || events[6] != "[DONE]" { // role + 3 + finish + usage + [DONE]
		t.Fatalf("answer stream %q (%v), want 6 events and [DONE]", events, err)
	}
	var text strings.Builder
	for _, ev := range events[1:4] {
		var c streamChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(*c.Choices[0].Delta.Content)
	}
	if text.String() != want {
		t.Fatalf("streamed text %q, want %q", text.String(), want)
	}
}

// checkLeaked checks a complete leaked response and returns what follows.
func checkLeaked(t *testing.T, wire []byte) []byte {
	t.Helper()
	head, body, rest := cutResponse(t, wire)
	if want := answerHead("application/json", len(body)); !reflect.DeepEqual(head, want) {
		t.Fatalf("leaked head %q, want %q", head, want)
	}
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content != "LEAKED-r1" {
		t.Fatalf("leaked body %s (%v), want a completion saying LEAKED-r1", body, err)
	}
	return rest
}

func TestFaults(t *testing.T) {
	const chat = `{"model":"test-model","messages":[{"role":"user","content":"x"}]}`
	const streamChat = `{"model":"test-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`
	answerThen := func(stream bool, then func(t *testing.T, rest []byte)) func(t *testing.T, wire []byte) {
		return func(t *testing.T, wire []byte) {
			head, body, rest := cutResponse(t, wire)
			checkAnswer(t, head, body, stream)
			then(t, rest)
		}
	}
	nothingMore := func(t *testing.T, rest []byte) {
		if len(rest) != 0 {
			t.Fatalf("%q after the answer, want nothing", rest)
		}
	}
	exactly := func(want string) func(t *testing.T, wire []byte) {
		return func(t *testing.T, wire []byte) {
			if string(wire) != want {
				t.Fatalf("wire %q, want %q", wire, want)
			}
		}
	}
	tests := []struct {
		fault  string
		stream bool
		check  func(t *testing.T, wire []byte)
		end    string // "keep": open and serving; "fin", "rst": closed so; "hang": open and silent
		stats  Stats  // after the fault (and the follow-up request when kept)
	}{
		{FaultExtraResponse, false, answerThen(false, func(t *testing.T, rest []byte) {
			nothingMore(t, checkLeaked(t, rest))
		}), "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultExtraResponse, true, answerThen(true, func(t *testing.T, rest []byte) {
			nothingMore(t, checkLeaked(t, rest))
		}), "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultExtraCRLF, false, answerThen(false, func(t *testing.T, rest []byte) {
			if string(rest) != "\r\n" {
				t.Fatalf("%q after the answer, want \\r\\n", rest)
			}
		}), "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultNoContentBody, false, exactly("HTTP/1.1 204 No Content\r\nX-Sim-Replica: r1\r\n\r\nLEAKED-r1"),
			"keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultShortLength, false, func(t *testing.T, wire []byte) {
			head, body, rest := cutResponse(t, wire)
			whole := append(bytes.Clone(body), rest...)
			if want := answerHead("application/json", utf8.RuneCount(whole)); !reflect.DeepEqual(head, want) {
				t.Fatalf("head %q, want %q (Content-Length in characters)", head, want)
			}
			if len(rest) < 4 || json.Valid(body) || !json.Valid(whole) || !bytes.Contains(whole, []byte(`"héllo wörld ✓"`)) {
				t.Fatalf("declared body %q and %q after it: want a JSON completion with héllo wörld ✓ cut 4+ bytes short", body, rest)
			}
		}, "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultLateResponse, false, answerThen(false, func(t *testing.T, rest []byte) {
			nothingMore(t, checkLeaked(t, rest))
		}), "keep", Stats{Requests: 2, Completed: 1, Faults: 1, Late: 1}},
		{FaultSwitchProtocols, false, func(t *testing.T, wire []byte) {
			const head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
			rest, ok := bytes.CutPrefix(wire, []byte(head))
			if !ok {
				t.Fatalf("wire %q does not start with %q", wire, head)
			}
			answerThen(false, nothingMore)(t, rest)
		}, "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultInformational, true, func(t *testing.T, wire []byte) {
			const head = "HTTP/1.1 102 Processing\r\n\r\n"
			rest, ok := bytes.CutPrefix(wire, []byte(head))
			if !ok {
				t.Fatalf("wire %q does not start with %q", wire, head)
			}
			answerThen(true, nothingMore)(t, rest)
		}, "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultCloseAfterRead, false, exactly(""), "fin", Stats{Requests: 1, Faults: 1}},
		{FaultResetAfterRead, false, exactly(""), "rst", Stats{Requests: 1, Faults: 1}},
		{FaultGarbage, false, exactly("this is not http\r\n\r\n"), "fin", Stats{Requests: 1, Faults: 1}},
		{FaultWrongContentType, false, func(t *testing.T, wire []byte) {
			head, body, rest := cutResponse(t, wire)
			var date string
			var lines []string
			for _, l := range head {
				if v, ok := strings.CutPrefix(l, "Date: "); ok {
					date = v
					continue
				}
				lines = append(lines, l)
			}
			want := []string{"HTTP/1.1 200 OK", "Content-Length: " + strconv.Itoa(len(body)), "Content-Type: text/html; charset=utf-8", "X-Sim-Replica: r1"}
			if _, err := http.ParseTime(date); err != nil || !reflect.DeepEqual(lines, want) {
				t.Fatalf("head %q, want %q and a Date", head, want)
			}
			if !bytes.HasPrefix(body, []byte("<!DOCTYPE html>")) || !bytes.Contains(body, []byte("</html>")) || len(rest) != 0 {
				t.Fatalf("body %q then %q, want one HTML page", body, rest)
			}
		}, "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultBadChunk, true, exactly("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\nX-Sim-Replica: r1\r\n\r\nzz\r\n"),
			"fin", Stats{Requests: 1, Faults: 1}},
		{FaultNULHeader, false, func(t *testing.T, wire []byte) {
			head, body, rest := cutResponse(t, wire)
			want := []string{"HTTP/1.1 200 OK", "Content-Type: application/json", "Content-Length: " + strconv.Itoa(len(body)), "X-Bad: a\x00b", "X-Sim-Replica: r1"}
			if !reflect.DeepEqual(head, want) {
				t.Fatalf("head %q, want %q", head, want)
			}
			checkAnswer(t, answerHead("application/json", len(body)), body, false)
			nothingMore(t, rest)
		}, "keep", Stats{Requests: 2, Completed: 1, Faults: 1}},
		{FaultHang, false, exactly(""), "hang", Stats{Requests: 1, Active: 1, Faults: 1}},
		{FaultDieMidStream, true, func(t *testing.T, wire []byte) {
			// net/http's chunked stream: the role chunk and one of the 3
			// content chunks, then the end of the connection without the
			// terminating chunk.
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(wire)), nil)
			if err != nil || resp.StatusCode != 200 || len(resp.TransferEncoding) != 1 || resp.Header.Get("X-Sim-Replica") != "r1" {
				t.Fatalf("response %+v (%v) from %q", resp, err, wire)
			}
			events, err := readEvents(resp.Body)
			if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 2 || !strings.Contains(events[1], `"[r1] "`) {
				t.Fatalf("events %q (%v), want the role chunk and one content chunk, then a truncation", events, err)
			}
		}, "fin", Stats{Requests: 1, Faults: 1}},
		{FaultDieMidStream, false, answerThen(false, nothingMore), "keep", Stats{Requests: 2, Completed: 2}},
	}
	for _, tc := range tests {
		name := tc.fault
		if tc.stream {
			name += " stream"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits out the server's silence
			s, ts := newSim(t, Options{Name: "r1", Chunks: 3, Latency: 5 * time.Millisecond})
			c := dialRaw(t, ts)
			body := chat
			if tc.stream {
				body = streamChat
			}
			if _, err := io.WriteString(c, rawPost("/v1/chat/completions", body, "X-Sim-Fault: "+tc.fault)); err != nil {
				t.Fatal(err)
			}
			wire, closed, err := readWire(t, c, 300*time.Millisecond)
			if tc.fault == FaultDieMidStream && !tc.stream {
				// Served normally, by net/http: compare the body only.
				resp, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(wire)), nil)
				if rerr != nil {
					t.Fatal(rerr)
				}
				b, _ := io.ReadAll(resp.Body)
				wire = []byte(strings.Join(answerHead("application/json", len(b)), "\r\n") + "\r\n\r\n" + string(b))
			}
			tc.check(t, wire)
			switch tc.end {
			case "keep", "hang":
				if closed {
					t.Fatalf("connection closed (%v), want it open", err)
				}
			case "fin":
				if !closed || err != nil {
					t.Fatalf("closed=%v err=%v, want a clean close", closed, err)
				}
			case "rst":
				if !closed || !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("closed=%v err=%v, want a reset", closed, err)
				}
			}
			if tc.end == "keep" {
				// The connection serves the next request as usual.
				if _, err := io.WriteString(c, rawPost("/v1/chat/completions", chat)); err != nil {
					t.Fatal(err)
				}
				wire, closed, err := readWire(t, c, 300*time.Millisecond)
				br := bufio.NewReader(bytes.NewReader(wire))
				resp, rerr := http.ReadResponse(br, nil)
				if rerr != nil || closed {
					t.Fatalf("next request on the connection: %v (closed %v, %v): %q", rerr, closed, err, wire)
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || resp.Header.Get("X-Sim-Replica") != "r1" || !bytes.Contains(b, []byte(`"[r1] lorem ipsum"`)) || br.Buffered() != 0 {
					t.Fatalf("next request on the connection: %q", wire)
				}
			}
			if st := waitStats(t, s, func(st Stats) bool { return st.Active == tc.stats.Active }); st != tc.stats {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
			if tc.end == "hang" {
				c.Close()
				want := tc.stats
				want.Active = 0
				if st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 }); st != want {
					t.Errorf("after the client left: stats %+v, want %+v", st, want)
				}
			}
		})
	}
}

// TestFaultKeptConnection: faults on a connection already kept by an
// earlier fault, late-response on a busy connection, and Close.
func TestFaultKeptConnection(t *testing.T) {
	const chat = `{"messages":[{"role":"user","content":"x"}]}`
	s, ts := newSim(t, Options{Name: "r1", Chunks: 3})
	c := dialRaw(t, ts)
	send := func(reqs ...string) []byte {
		t.Helper()
		if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
			t.Fatal(err)
		}
		wire, closed, err := readWire(t, c, 300*time.Millisecond)
		if closed {
			t.Fatalf("connection closed (%v) after %q", err, wire)
		}
		return wire
	}
	// extra-crlf, then extra-response on the kept connection.
	head, body, rest := cutResponse(t, send(rawPost("/v1/chat/completions", chat, "X-Sim-Fault: extra-crlf")))
	checkAnswer(t, head, body, false)
	if string(rest) != "\r\n" {
		t.Fatalf("rest %q", rest)
	}
	head, body, rest = cutResponse(t, send(rawPost("/v1/chat/completions", chat, "X-Sim-Fault: extra-response")))
	checkAnswer(t, head, body, false)
	if rest = checkLeaked(t, rest); len(rest) != 0 {
		t.Fatalf("rest %q", rest)
	}
	// late-response with the next request already sent: the connection is
	// not idle, so no unsolicited response.
	wire := send(rawPost("/v1/chat/completions", chat, "X-Sim-Fault: late-response"), rawPost("/v1/chat/completions", chat))
	head, body, rest = cutResponse(t, wire)
	checkAnswer(t, head, body, false)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(rest)), nil)
	if err != nil || resp.StatusCode != 200 || bytes.Contains(wire, []byte("LEAKED")) {
		t.Fatalf("late-response on a busy connection: %q", wire)
	}
	if st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 }); st != (Stats{Requests: 4, Completed: 1, Faults: 3}) {
		t.Errorf("stats %+v", st)
	}
	// Close closes the kept connection; later faults close theirs.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if wire, closed, err := readWire(t, c, 2*time.Second); !closed || len(wire) != 0 {
		t.Fatalf("after Close: closed=%v (%v), read %q", closed, err, wire)
	}
	c2 := dialRaw(t, ts)
	if _, err := io.WriteString(c2, rawPost("/v1/chat/completions", chat, "X-Sim-Fault: extra-crlf")); err != nil {
		t.Fatal(err)
	}
	if wire, closed, _ := readWire(t, c2, 2*time.Second); !closed || !bytes.HasSuffix(wire, []byte("}\r\n")) {
		t.Fatalf("fault after Close: closed=%v, read %q", closed, wire)
	}
}

func TestFaultHeaderInvalid(t *testing.T) {
	s, ts := newSim(t, Options{})
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", chatBody, map[string]string{"X-Sim-Fault": "meltdown"})
	checkAPIError(t, resp, 400, "BadRequestError", "X-Sim-Fault")
	// Invalid requests get their 4xx, not the fault.
	resp = post(t, context.Background(), ts.URL+"/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`, map[string]string{"X-Sim-Fault": "garbage"})
	checkAPIError(t, resp, 404, "NotFoundError", "other")
	if st := s.Stats(); st != (Stats{Requests: 2}) {
		t.Errorf("stats %+v", st)
	}
}

// TestFaultRate: a seeded fraction of requests gets the fault, the same
// ones for the same seed.
func TestFaultRate(t *testing.T) {
	run := func(seed int64) []bool {
		s, ts := newSim(t, Options{Fault: FaultCloseAfterRead, FaultRate: 0.5, Seed: seed, Chunks: 1})
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		var failed []bool
		for range 40 {
			resp, err := c.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
			if err == nil {
				readAll(t, resp)
			}
			failed = append(failed, err != nil)
		}
		n := 0
		for _, f := range failed {
			if f {
				n++
			}
		}
		if st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 }); st != (Stats{Requests: 40, Completed: int64(40 - n), Faults: int64(n)}) {
			t.Errorf("seed %d: %d failed, stats %+v", seed, n, st)
		}
		if n == 0 || n == 40 {
			t.Errorf("fault rate 0.5 hit %d/40", n)
		}
		return failed
	}
	a, b := run(7), run(7)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different faults:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, run(8)) {
		t.Errorf("seeds 7 and 8 gave the same faults")
	}

	// die-mid-stream counts streams only.
	s, ts := newSim(t, Options{Fault: FaultDieMidStream, FaultRate: 1, Chunks: 4})
	resp := post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x"}`, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"finish_reason":"stop"`)) {
		t.Fatalf("JSON reply %d %s", resp.StatusCode, b)
	}
	resp = post(t, context.Background(), ts.URL+"/v1/completions", `{"prompt":"x","stream":true}`, nil)
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("stream: %v, want io.ErrUnexpectedEOF", err)
	}
	resp.Body.Close()
	if st := waitStats(t, s, func(st Stats) bool { return st.Active == 0 }); st != (Stats{Requests: 2, Completed: 1, Faults: 1}) {
		t.Errorf("stats %+v", st)
	}
}

func TestRequestLog(t *testing.T) {
	var buf testenv.Buffer
	s, ts := newSim(t, Options{Chunks: 2, RequestLog: slog.New(slog.NewJSONHandler(&buf, nil))})
	for _, tc := range []struct {
		path, body string
		hdr        map[string]string
	}{
		{"/v1/chat/completions", chatBody, map[string]string{"X-Request-Id": "a"}},
		{"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"x"}]}`, map[string]string{"X-Request-Id": "b", "X-Sim-Drop-After": "1"}},
		{"/v1/completions", `{"prompt":"x"}`, map[string]string{"X-Request-Id": "c", "X-Sim-Status": "503"}},
		{"/v1/embeddings", `{"input":"x"}`, map[string]string{"X-Request-Id": "d", "X-Sim-Fault": "wrong-content-type"}},
		{"/v1/completions", `{"prompt":[]}`, map[string]string{"X-Request-Id": "e"}},
	} {
		resp := post(t, context.Background(), ts.URL+tc.path, tc.body, tc.hdr)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	waitStats(t, s, func(st Stats) bool { return st.Active == 0 })
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] != "post" {
			t.Fatalf("log line %q: msg %v", line, m["msg"])
		}
		delete(m, "time")
		delete(m, "level")
		delete(m, "msg")
		got = append(got, fmt.Sprint(m))
	}
	want := []string{
		"map[answer:ok path:/v1/chat/completions request_id:a stream:false]",
		"map[after:1 answer:drop path:/v1/chat/completions request_id:b stream:true]",
		"map[answer:error path:/v1/completions request_id:c status:503]",
		"map[answer:fault fault:wrong-content-type path:/v1/embeddings request_id:d stream:false]",
		"map[answer:invalid path:/v1/completions request_id:e status:400]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestStreamUsageOnlyWhenAsked: as vLLM, a stream ends with its usage
// chunk only when stream_options.include_usage asks, and stream_options
// on a request that does not stream is refused.
func TestStreamUsageOnlyWhenAsked(t *testing.T) {
	_, ts := newSim(t, Options{Name: "rep", Chunks: 2})
	for _, tc := range []struct {
		body   string
		events int // role + 2 content + finish (+ usage) + [DONE]
	}{
		{`{"model":"test-model","stream":true,"messages":[{"role":"user","content":"x"}]}`, 5},
		{`{"model":"test-model","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"x"}]}`, 5},
		{`{"model":"test-model","stream":true,"stream_options":{},"messages":[{"role":"user","content":"x"}]}`, 5},
		{`{"model":"test-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, 6},
	} {
		resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", tc.body, nil)
		events, err := readEvents(resp.Body)
		resp.Body.Close()
		if err != nil || len(events) != tc.events {
			t.Errorf("%s: %d events (%v), want %d: %q", tc.body, len(events), err, tc.events, events)
		}
		for _, ev := range events {
			if strings.Contains(ev, `"usage"`) != (tc.events == 6 && strings.Contains(ev, `"choices":[]`)) {
				t.Errorf("%s: event %s", tc.body, ev)
			}
		}
	}
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", `{"model":"test-model","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "stream=True") {
		t.Errorf("stream_options without stream: %d %s", resp.StatusCode, b)
	}
}
