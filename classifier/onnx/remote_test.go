package onnx

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
)

// fakeEngine serves POST /v1/embeddings as an OpenAI-compatible engine
// does: each text's vector is vec(text), or what answer writes instead,
// as base64 (what the client asks for) or, with floats set, as JSON
// numbers (as some engines answer whatever they are asked).
type fakeEngine struct {
	*httptest.Server
	floats atomic.Bool
	calls  atomic.Int64
	mu     sync.Mutex
	inputs [][]string // each call's texts
	auth   []string
	tmo    []string                                                          // each call's X-Request-Timeout
	answer func(w http.ResponseWriter, r *http.Request, texts []string) bool // true: answered
}

// vec is the fake encoder: 4 dims from the text's length and first byte.
func vec(text string) []float32 {
	b := byte(0)
	if text != "" {
		b = text[0]
	}
	return []float32{float32(len(text)) + 1, float32(b), 1, 0}
}

func newFakeEngine(t *testing.T) *fakeEngine {
	f := &fakeEngine{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var req struct {
			Model          string   `json:"model"`
			Input          []string `json:"input"`
			EncodingFormat string   `json:"encoding_format"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "fake-enc" || req.EncodingFormat != "base64" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.inputs = append(f.inputs, req.Input)
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.tmo = append(f.tmo, r.Header.Get("X-Request-Timeout"))
		answer := f.answer
		f.mu.Unlock()
		if answer != nil && answer(w, r, req.Input) {
			return
		}
		type item struct {
			Object    string `json:"object"`
			Index     int    `json:"index"`
			Embedding any    `json:"embedding"`
		}
		var out struct {
			Object string `json:"object"`
			Data   []item `json:"data"`
			Model  string `json:"model"`
		}
		out.Object, out.Model = "list", req.Model
		// In reverse: the client places vectors by index, not by order.
		for i := len(req.Input) - 1; i >= 0; i-- {
			var e any = vec(req.Input[i])
			if !f.floats.Load() {
				var b []byte
				for _, x := range vec(req.Input[i]) {
					b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
				}
				e = base64.StdEncoding.EncodeToString(b)
			}
			out.Data = append(out.Data, item{"embedding", i, e})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeEngine) setAnswer(a func(w http.ResponseWriter, r *http.Request, texts []string) bool) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

var fakeManifest = Manifest{Format: 1, Name: "fake-enc", Input: InputUSE, Pooling: PoolNone, Dims: 4, MaxTokens: 128, Tokenizer: "x"}

func fakeHead(t *testing.T) *classifier.Linear {
	t.Helper()
	// Class "long" leans on dim 0 (the text's length), "b" on dim 1.
	h := &classifier.Linear{Kind: "softmax", Classes: []string{"long", "b"}, Dims: 4, W: []float32{4, 0, 0, 0, 0, 4, 0, 0}, B: []float32{0, 0}}
	return h
}

func newRemoteClassifier(t *testing.T, f *fakeEngine, rc RemoteConfig, opts Options) *Classifier {
	t.Helper()
	rc.URL, rc.Model = f.URL, "fake-enc"
	md, err := NewRemote(fakeManifest, rc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { md.Close() })
	c, err := NewClassifier(md, fakeHead(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRemoteClassify(t *testing.T) {
	f := newFakeEngine(t)
	for _, tc := range []struct{ sched, floats bool }{{false, false}, {true, false}, {true, true}} {
		sched := tc.sched
		t.Run(fmt.Sprintf("scheduled=%v,floats=%v", sched, tc.floats), func(t *testing.T) {
			f.floats.Store(tc.floats)
			c := newRemoteClassifier(t, f, RemoteConfig{APIKey: "k3y"}, Options{Schedule: sched})
			ctx := context.Background()
			if sched {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
			}
			for _, text := range []string{"bbb", strings.Repeat("x", 40)} {
				var r classifier.Result
				if err := c.Classify(ctx, text, &r); err != nil {
					t.Fatalf("Classify(%q): %v", text, err)
				}
				want := make([]float32, 4)
				copy(want, vec(text))
				classifier.L2Normalize(want)
				probs := make([]float32, 2)
				c.Head().Probs(want, probs)
				if r.Tier != 2 || r.Probs[0] != probs[0] || r.Probs[1] != probs[1] {
					t.Errorf("Classify(%q) = tier %d probs %v, want tier 2 probs %v (the engine's vector, normalised)", text, r.Tier, r.Probs, probs)
				}
			}
			f.mu.Lock()
			if got := f.auth[len(f.auth)-1]; got != "Bearer k3y" {
				t.Errorf("Authorization = %q, want the configured key as a bearer token", got)
			}
			// The time left is sent, so the engine can refuse what it
			// cannot do in time: the context's 5s, or the 30s default.
			limit := map[bool]float64{true: 5, false: 30}[sched]
			if got, err := strconv.ParseFloat(f.tmo[len(f.tmo)-1], 64); err != nil || got <= limit-1 || got > limit {
				t.Errorf("X-Request-Timeout = %q, want the seconds left, just under %v", f.tmo[len(f.tmo)-1], limit)
			}
			f.mu.Unlock()
		})
	}
}

// TestRemotePrepares: the engine is sent each text as the local encoder
// reads it (prepare.go), scheduled or not, so that an engine that knows
// nothing of the preparation gives the local encoder's vectors.
func TestRemotePrepares(t *testing.T) {
	f := newFakeEngine(t)
	for _, sched := range []bool{false, true} {
		t.Run(fmt.Sprintf("scheduled=%v", sched), func(t *testing.T) {
			c := newRemoteClassifier(t, f, RemoteConfig{}, Options{Schedule: sched})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, tc := range []struct{ text, sent string }{
				{"  WHY IS\tMY\n\nBUILD RED ", "why is my build red"},
				{"plain text", "plain text"},
			} {
				f.mu.Lock()
				f.inputs = nil
				f.mu.Unlock()
				var r classifier.Result
				if err := c.Classify(ctx, tc.text, &r); err != nil {
					t.Fatalf("Classify(%q): %v", tc.text, err)
				}
				f.mu.Lock()
				got := f.inputs
				f.mu.Unlock()
				if len(got) != 1 || len(got[0]) != 1 || got[0][0] != tc.sent {
					t.Errorf("Classify(%q) sent %q, want [[%q]]", tc.text, got, tc.sent)
				}
			}
		})
	}
}

// TestRemoteBatch: texts that queue while a call is out go as one call.
func TestRemoteBatch(t *testing.T) {
	f := newFakeEngine(t)
	gate, first := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		once.Do(func() { close(first); <-gate })
		return false
	})
	c := newRemoteClassifier(t, f, RemoteConfig{}, Options{Schedule: true, MaxConcurrent: 1, MaxBatch: 8, BatchTokens: 1024})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	classify := func(i int) {
		defer wg.Done()
		var r classifier.Result
		errs[i] = c.Classify(ctx, "same length text", &r)
	}
	wg.Add(1)
	go classify(0)
	<-first // the first call is out, held by the engine
	wg.Add(3)
	for i := 1; i < 4; i++ {
		go classify(i)
	}
	for {
		// Wait until the three are queued behind the held call.
		if s, _ := c.RunStats(); s.Queued == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the texts never queued")
		case <-time.After(time.Millisecond):
		}
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("text %d: %v", i, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.inputs) != 2 || len(f.inputs[1]) != 3 {
		sizes := []int{}
		for _, in := range f.inputs {
			sizes = append(sizes, len(in))
		}
		t.Errorf("calls carried %v texts, want [1 3]: the queued texts in one call", sizes)
	}
}

// TestRemoteFaults: each way an engine can fail gives an error (the
// decision's tier2_error, tier2_timeout), counted, never a panic, and
// never a text or answer body in the error.
func TestRemoteFaults(t *testing.T) {
	const secret = "the prompt SECRET-7"
	raw := func(status int, body string) func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		return func(w http.ResponseWriter, r *http.Request, texts []string) bool {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
			return true
		}
	}
	for _, tc := range []struct {
		name     string
		answer   func(w http.ResponseWriter, r *http.Request, texts []string) bool
		down     bool
		deadline bool // the error is the budget's
		want     string
	}{
		{name: "down", down: true, want: "connect"},
		{name: "slow", deadline: true, want: "no answer in time", answer: func(w http.ResponseWriter, r *http.Request, texts []string) bool {
			<-r.Context().Done() // answers only when the client has gone
			return true
		}},
		{name: "wrong dimension", want: "a vector of 3 dims, the heads take 4", answer: raw(200, `{"data":[{"index":0,"embedding":[1,2,3]}]}`)},
		{name: "NaN", want: "not an embeddings list", answer: raw(200, `{"data":[{"index":0,"embedding":[NaN,1,2,3]}]}`)},
		{name: "NaN as a string", want: "not an embeddings list", answer: raw(200, `{"data":[{"index":0,"embedding":["NaN",1,2,3]}]}`)},
		{name: "overflow", want: "not an embeddings list", answer: raw(200, `{"data":[{"index":0,"embedding":[1e39,1,2,3]}]}`)},
		// base64 of float32s: 3 of them, a NaN among 4, not base64.
		{name: "base64 wrong dimension", want: "a vector of 3 dims, the heads take 4", answer: raw(200, `{"data":[{"index":0,"embedding":"AACAPwAAgD8AAIA/"}]}`)},
		{name: "base64 NaN", want: "not finite and non-zero", answer: raw(200, `{"data":[{"index":0,"embedding":"AADAfwAAgD8AAIA/AACAPw=="}]}`)},
		{name: "base64 ragged", want: "a vector of 0 dims", answer: raw(200, `{"data":[{"index":0,"embedding":"AACA"}]}`)},
		{name: "not base64", want: "neither base64 nor float32", answer: raw(200, `{"data":[{"index":0,"embedding":"`+secret+`"}]}`)},
		{name: "zero vector", want: "not finite and non-zero", answer: raw(200, `{"data":[{"index":0,"embedding":[0,0,0,0]}]}`)},
		{name: "fewer vectors", want: "0 vectors for 1 texts", answer: raw(200, `{"data":[]}`)},
		{name: "bad index", want: "has index 3", answer: raw(200, `{"data":[{"index":3,"embedding":[1,2,3,4]}]}`)},
		{name: "200 with an error body", want: "status 200 with an error object", answer: raw(200, `{"error":{"message":"echo: `+secret+`","type":"invalid_request_error"}}`)},
		{name: "500", want: "status 500", answer: raw(500, `{"error":{"message":"`+secret+`"}}`)},
		{name: "504", want: "status 504, no answer in time", deadline: true, answer: raw(504, `{"error":{"message":"`+secret+`"}}`)},
		{name: "not JSON", want: "not an embeddings list", answer: raw(200, secret)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine(t)
			f.setAnswer(tc.answer)
			c := newRemoteClassifier(t, f, RemoteConfig{Failures: 100}, Options{Schedule: true})
			if tc.down {
				f.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			var r classifier.Result
			err := c.Classify(ctx, secret, &r)
			if err == nil {
				t.Fatalf("Classify = nil error, want one saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Classify: %v, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("Classify: %v: the error carries the prompt", err)
			}
			if tc.deadline != errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Classify: %v: is the deadline's = %v, want %v", err, errors.Is(err, context.DeadlineExceeded), tc.deadline)
			}
			if s, _ := c.RunStats(); s.Failed != 1 {
				t.Errorf("RunStats().Failed = %d, want 1", s.Failed)
			}
		})
	}
}

// TestRemoteOverloaded: an engine that answers 429 sheds the texts
// (ErrShed) and is not counted as failing: the breaker stays closed.
func TestRemoteOverloaded(t *testing.T) {
	f := newFakeEngine(t)
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":{"message":"overloaded","type":"rate_limit_error","code":"overloaded"}}`, http.StatusTooManyRequests)
		return true
	})
	c := newRemoteClassifier(t, f, RemoteConfig{Failures: 2, Cooldown: time.Minute}, Options{Schedule: true})
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var r classifier.Result
		err := c.Classify(ctx, "text", &r)
		cancel()
		if !errors.Is(err, classifier.ErrShed) {
			t.Fatalf("call %d: %v, want ErrShed", i, err)
		}
	}
	if n := f.calls.Load(); n != 5 {
		t.Errorf("the engine had %d calls, want 5: a 429 does not open the breaker", n)
	}
	if s, _ := c.RunStats(); s.Down || s.Failed != 0 || s.Refused != 0 {
		t.Errorf("RunStats = down %v failed %d refused %d, want closed, none failed or refused", s.Down, s.Failed, s.Refused)
	}
}

// TestRemoteEmptyText: the empty text (a prepared text of nothing but
// spaces too) may come back as the zero vector, as the local USE encoder
// gives it; any other text's zero vector is refused.
func TestRemoteEmptyText(t *testing.T) {
	f := newFakeEngine(t)
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":[{"index":0,"embedding":[0,0,0,0]}]}`))
		return true
	})
	c := newRemoteClassifier(t, f, RemoteConfig{}, Options{})
	for _, tc := range []struct {
		text string
		ok   bool
	}{{"", true}, {" \t\n ", true}, {"x", false}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := c.Features(ctx, tc.text, nil)
		cancel()
		if tc.ok && (err != nil || len(v) != 4 || v[0] != 0) {
			t.Errorf("Features(%q) = %v, %v: want the zero vector", tc.text, v, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("Features(%q): the zero vector was taken for a text with words", tc.text)
		}
	}
}

// TestRemoteBreakerLate: calls that end unanswered at their deadline do
// not open the breaker while the engine answered within a cooldown (it is
// slow, not down); past that they count, and a hung engine is left alone.
func TestRemoteBreakerLate(t *testing.T) {
	f := newFakeEngine(t)
	var hang atomic.Bool
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		if hang.Load() {
			<-r.Context().Done()
			return true
		}
		return false
	})
	c := newRemoteClassifier(t, f, RemoteConfig{Failures: 2, Cooldown: time.Minute}, Options{})
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	c.remote.br.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	classify := func(budget time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		var r classifier.Result
		return c.Classify(ctx, "text", &r)
	}
	if err := classify(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	for i := range 4 {
		advance(10 * time.Second)
		if err := classify(20 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("late call %d: %v, want the deadline's error", i, err)
		}
	}
	if down, failed := c.remote.br.open(), c.remote.failed.Load(); down || failed != 4 {
		t.Fatalf("40s after the last answer: down %v, %d failed, want closed (answered within the cooldown), 4 failed", down, failed)
	}
	advance(30 * time.Second) // 70s: past the cooldown since the last answer
	for range 2 {
		_ = classify(20 * time.Millisecond)
	}
	if err := classify(time.Second); !errors.Is(err, classifier.ErrEncoderDown) {
		t.Fatalf("no answer for over a cooldown and 2 late calls: %v, want ErrEncoderDown", err)
	}
}

// TestRemoteBreaker: after Failures failed calls the engine is left alone
// for Cooldown (ErrEncoderDown, no call made), then called again.
func TestRemoteBreaker(t *testing.T) {
	f := newFakeEngine(t)
	fail := func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return true
	}
	f.setAnswer(fail)
	c := newRemoteClassifier(t, f, RemoteConfig{Failures: 2, Cooldown: time.Minute}, Options{Schedule: true})
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	c.remote.br.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	classify := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var r classifier.Result
		return c.Classify(ctx, "text", &r)
	}
	for i := range 2 {
		if err := classify(); err == nil || errors.Is(err, classifier.ErrEncoderDown) {
			t.Fatalf("call %d: %v, want the engine's failure", i, err)
		}
	}
	if err := classify(); !errors.Is(err, classifier.ErrEncoderDown) {
		t.Fatalf("after 2 failures: %v, want ErrEncoderDown", err)
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("the engine had %d calls, want 2: none while the breaker is open", n)
	}
	if s, _ := c.RunStats(); !s.Down || s.Refused != 1 || s.Failed != 2 {
		t.Errorf("RunStats = down %v refused %d failed %d, want down, 1 refused, 2 failed", s.Down, s.Refused, s.Failed)
	}
	f.setAnswer(nil) // the engine is back
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if err := classify(); err != nil {
		t.Fatalf("after the cooldown: %v, want the engine called and answering", err)
	}
	if s, _ := c.RunStats(); s.Down {
		t.Error("the breaker is still open after a call succeeded")
	}
	// It closed: it takes 2 more failures to open again.
	f.setAnswer(fail)
	_ = classify()
	if err := classify(); errors.Is(err, classifier.ErrEncoderDown) {
		t.Errorf("second failure after closing: %v, want the engine's failure", err)
	}
}

// TestRemoteRefusesAnotherEncoder: heads trained on one encoder are never
// run on another; the message names both.
func TestRemoteRefusesAnotherEncoder(t *testing.T) {
	for _, tc := range []struct {
		rc   RemoteConfig
		want []string
	}{
		{RemoteConfig{URL: "http://127.0.0.1:1", Model: "bge-small-en-v1.5"}, []string{`"fake-enc"`, `"bge-small-en-v1.5"`}},
		{RemoteConfig{URL: "http://127.0.0.1:1", Model: "fake-enc", Pooling: PoolCLS}, []string{`"none"`, `"cls"`}},
		{RemoteConfig{URL: "http://127.0.0.1:1", Model: "fake-enc", Dims: 384}, []string{"4 dims", "384"}},
		{RemoteConfig{URL: "ftp://127.0.0.1:1", Model: "fake-enc"}, []string{"http://"}},
		{RemoteConfig{URL: "http://user:pw@127.0.0.1:1", Model: "fake-enc"}, []string{"api_key_env"}},
	} {
		_, err := NewRemote(fakeManifest, tc.rc, Options{})
		if err == nil {
			t.Errorf("NewRemote(%+v) = nil error, want a refusal", tc.rc)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("NewRemote(%+v): %v, want it to name %s", tc.rc, err, w)
			}
		}
		if strings.Contains(err.Error(), "pw") {
			t.Errorf("NewRemote: %v: the error carries the URL's password", err)
		}
	}
}

func TestEmbeddingsURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:8000":                "http://h:8000/v1/embeddings",
		"http://h:8000/":               "http://h:8000/v1/embeddings",
		"https://h/v1":                 "https://h/v1/embeddings",
		"https://h/openai/v1/":         "https://h/openai/v1/embeddings",
		"http://h:7997/v1/embeddings":  "http://h:7997/v1/embeddings",
		"http://h/prefix/x/embeddings": "http://h/prefix/x/embeddings",
	} {
		if got, err := embeddingsURL(in); err != nil || got != want {
			t.Errorf("embeddingsURL(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
}

// TestRemoteNoRedirect: a redirect is a failure, not followed: the texts
// and the key stay with the configured URL.
func TestRemoteNoRedirect(t *testing.T) {
	elsewhere := newFakeEngine(t)
	f := newFakeEngine(t)
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		http.Redirect(w, r, elsewhere.URL+"/v1/embeddings", http.StatusTemporaryRedirect)
		return true
	})
	c := newRemoteClassifier(t, f, RemoteConfig{APIKey: "k3y"}, Options{})
	var r classifier.Result
	if err := c.Classify(context.Background(), "text", &r); err == nil || !strings.Contains(err.Error(), "status 307") {
		t.Errorf("Classify through a redirect: %v, want status 307", err)
	}
	if n := elsewhere.calls.Load(); n != 0 {
		t.Errorf("the redirect's target had %d calls, want none", n)
	}
}

// TestRemoteErrorsWithoutQuery: a URL's query (where some gateways take a
// key) stays out of errors.
func TestRemoteErrorsWithoutQuery(t *testing.T) {
	f := newFakeEngine(t)
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		http.Error(w, "no", http.StatusInternalServerError)
		return true
	})
	md, err := NewRemote(fakeManifest, RemoteConfig{URL: f.URL + "/v1/embeddings?api-key=SECRET-9", Model: "fake-enc"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	_, err = md.Features(context.Background(), "text", nil)
	if err == nil || !strings.Contains(err.Error(), "status 500") || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("Features: %v, want status 500 and no query", err)
	}
}

// TestDecodeEmbedding: base64 is read as sent, and with / escaped as \/
// (which JSON allows); JSON numbers too; anything else is refused.
func TestDecodeEmbedding(t *testing.T) {
	var want []float32
	var b64 string
	for x := float32(1); !strings.Contains(b64, "/"); x += 0.125 {
		want = []float32{x, -x / 3, 0.5, 1e-3}
		var raw []byte
		for _, f := range want {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
		}
		b64 = base64.StdEncoding.EncodeToString(raw)
	}
	for _, tc := range []struct {
		name, raw string
		ok        bool
	}{
		{"base64", `"` + b64 + `"`, true},
		{"escaped slashes", `"` + strings.ReplaceAll(b64, "/", `\/`) + `"`, true},
		{"numbers", fmt.Sprintf("[%v,%v,%v,%v]", want[0], want[1], want[2], want[3]), true},
		{"not base64", `"%%%%"`, false},
		{"bad escape", `"\q"`, false},
		{"object", `{}`, false},
	} {
		dst := make([]float32, 4)
		n, err := decodeEmbedding(json.RawMessage(tc.raw), dst)
		if !tc.ok {
			if err == nil && n == 4 {
				t.Errorf("%s: decodeEmbedding(%s) = %v, want it refused", tc.name, tc.raw, dst)
			}
			continue
		}
		if err != nil || n != 4 || !slices.Equal(dst, want) {
			t.Errorf("%s: decodeEmbedding(%s) = %v, %d, %v; want %v", tc.name, tc.raw, dst, n, err, want)
		}
	}
}

// TestRemoteUsageTokens: a text sent alone takes its tokens from the
// engine's usage (the text as the engine read it, cut to the encoder's
// cap); without usage, the estimate.
func TestRemoteUsageTokens(t *testing.T) {
	f := newFakeEngine(t)
	usage := 0
	f.setAnswer(func(w http.ResponseWriter, r *http.Request, texts []string) bool {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":[{"index":0,"embedding":[1,2,3,4]}],"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, usage, usage)
		return true
	})
	c := newRemoteClassifier(t, f, RemoteConfig{}, Options{})
	text := strings.Repeat("word ", 20) // 99 bytes once prepared: estimated 26 tokens
	for _, tc := range []struct{ usage, want int }{{11, 11}, {500, 128}, {0, 26}} {
		usage = tc.usage
		var r classifier.Result
		if err := c.Classify(context.Background(), text, &r); err != nil {
			t.Fatal(err)
		}
		if r.Tokens != tc.want {
			t.Errorf("usage %d: Tokens = %d, want %d", tc.usage, r.Tokens, tc.want)
		}
	}
}
