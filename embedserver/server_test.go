package embedserver

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triagegw/triage/classifier"
)

// wordEncoder stands in for the ONNX encoder in these tests of the HTTP
// edge (cmd/triage's tests serve the real one): a text's vector is
// [len, first byte, 1], its tokens its words; "SHED" is refused as a
// saturated scheduler refuses, "NAN" gives a NaN.
type wordEncoder struct{}

func (wordEncoder) Dims() int { return 3 }

func (wordEncoder) Encode(ctx context.Context, text string, dst []float32) ([]float32, int, error) {
	switch text {
	case "SHED":
		return dst, 0, classifier.ErrShed
	case "NAN":
		return []float32{float32(math.NaN()), 0, 0}, 1, nil
	case "WAIT":
		<-ctx.Done()
		return dst, 0, ctx.Err()
	}
	b := float32(0)
	if text != "" {
		b = float32(text[0])
	}
	return []float32{float32(len(text)), b, 1}, len(strings.Fields(text)), nil
}

func newTestServer(t *testing.T, o Options) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if o.Model == "" {
		o.Model = "enc-1"
	}
	o.Registry = reg
	s, err := New(wordEncoder{}, o)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, reg
}

func post(t *testing.T, url, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type answer struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func TestEmbeddings(t *testing.T) {
	srv, _ := newTestServer(t, Options{})
	for _, tc := range []struct {
		name, body string
		want       [][]float32
		tokens     int
	}{
		{"string", `{"model":"enc-1","input":"hello there"}`, [][]float32{{11, 'h', 1}}, 2},
		{"array", `{"model":"enc-1","input":["a b c","zz"],"encoding_format":"float"}`, [][]float32{{5, 'a', 1}, {2, 'z', 1}}, 4},
		{"empty string", `{"model":"enc-1","input":[""]}`, [][]float32{{0, 0, 1}}, 0},
		{"base64", `{"model":"enc-1","input":["xy"],"encoding_format":"base64","dimensions":3,"user":"u"}`, [][]float32{{2, 'x', 1}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := post(t, srv.URL+"/v1/embeddings", tc.body)
			if code != http.StatusOK {
				t.Fatalf("POST %s = %d %s, want 200", tc.body, code, b)
			}
			var a answer
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatalf("answer %s: %v", b, err)
			}
			if a.Object != "list" || a.Model != "enc-1" || a.Usage.PromptTokens != tc.tokens || a.Usage.TotalTokens != tc.tokens || len(a.Data) != len(tc.want) {
				t.Fatalf("answer = %s, want a list of %d from enc-1 with %d tokens", b, len(tc.want), tc.tokens)
			}
			for i, d := range a.Data {
				var v []float32
				if strings.Contains(tc.body, "base64") {
					var s string
					if err := json.Unmarshal(d.Embedding, &s); err != nil {
						t.Fatal(err)
					}
					raw, err := base64.StdEncoding.DecodeString(s)
					if err != nil {
						t.Fatal(err)
					}
					for k := 0; k+4 <= len(raw); k += 4 {
						v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(raw[k:])))
					}
				} else if err := json.Unmarshal(d.Embedding, &v); err != nil {
					t.Fatal(err)
				}
				if d.Index != i || d.Object != "embedding" || len(v) != len(tc.want[i]) {
					t.Fatalf("data[%d] = %+v (%v), want index %d, vector %v", i, d, v, i, tc.want[i])
				}
				for k := range v {
					if v[k] != tc.want[i][k] {
						t.Errorf("data[%d] = %v, want %v", i, v, tc.want[i])
					}
				}
			}
		})
	}
}

// TestFloatsRoundTrip: the JSON floats read back as the very float32s
// the encoder gave, so a client's vectors are the encoder's bit for bit.
func TestFloatsRoundTrip(t *testing.T) {
	vecs := [][]float32{{0.1, -1e-30, 3.4028235e38, 1.17549435e-38, 0.33333334, -0}}
	var got struct {
		Data []struct{ Embedding []float32 }
	}
	if err := json.Unmarshal(appendAnswer(nil, "m", vecs, 0, false), &got); err != nil {
		t.Fatal(err)
	}
	for k, f := range vecs[0] {
		if math.Float32bits(got.Data[0].Embedding[k]) != math.Float32bits(f) && f != 0 {
			t.Errorf("float %d: sent %v, read back %v", k, f, got.Data[0].Embedding[k])
		}
	}
}

// TestBadRequests: each bad request gets an OpenAI-shaped error with the
// status and code a client can act on, and nothing is encoded.
func TestBadRequests(t *testing.T) {
	srv, reg := newTestServer(t, Options{MaxInputs: 3, MaxTextBytes: 10, MaxBodyBytes: 200, APIKey: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, tc := range []struct {
		name, path, method, body string
		hdr                      []string
		status                   int
		code                     string
	}{
		{"bad JSON", "", "", `{"model":"enc-1","input":`, auth, 400, "invalid_json"},
		{"not an object", "", "", `["x"]`, auth, 400, "invalid_json"},
		{"trailing data", "", "", `{"model":"enc-1","input":"a"} {}`, auth, 400, "invalid_json"},
		{"empty body", "", "", ``, auth, 400, "invalid_json"},
		{"no model", "", "", `{"input":"a"}`, auth, 400, "missing_required_parameter"},
		{"wrong model", "", "", `{"model":"bge-small","input":"a"}`, auth, 404, "model_not_found"},
		{"no input", "", "", `{"model":"enc-1"}`, auth, 400, "missing_required_parameter"},
		{"null input", "", "", `{"model":"enc-1","input":null}`, auth, 400, "missing_required_parameter"},
		{"empty input", "", "", `{"model":"enc-1","input":[]}`, auth, 400, "invalid_value"},
		{"number input", "", "", `{"model":"enc-1","input":3}`, auth, 400, "invalid_type"},
		{"mixed input", "", "", `{"model":"enc-1","input":["a",3]}`, auth, 400, "invalid_type"},
		{"token ids", "", "", `{"model":"enc-1","input":[1,2,3]}`, auth, 400, "invalid_type"},
		{"token id arrays", "", "", `{"model":"enc-1","input":[[1,2]]}`, auth, 400, "invalid_type"},
		{"too many inputs", "", "", `{"model":"enc-1","input":["a","b","c","d"]}`, auth, 400, "too_many_inputs"},
		{"too long input", "", "", `{"model":"enc-1","input":["a","01234567890"]}`, auth, 400, "input_too_long"},
		{"body too large", "", "", `{"model":"enc-1","input":"` + strings.Repeat(" ", 300) + `"}`, auth, 413, "request_too_large"},
		{"format", "", "", `{"model":"enc-1","input":"a","encoding_format":"int8"}`, auth, 400, "invalid_value"},
		{"dimensions", "", "", `{"model":"enc-1","input":"a","dimensions":256}`, auth, 400, "invalid_value"},
		{"no key", "", "", `{"model":"enc-1","input":"a"}`, nil, 401, "invalid_api_key"},
		{"wrong key", "", "", `{"model":"enc-1","input":"a"}`, []string{"Authorization", "Bearer s3cres"}, 401, "invalid_api_key"},
		{"GET", "", http.MethodGet, ``, auth, 405, "method_not_allowed"},
		{"unknown path", "/v1/chat/completions", "", `{}`, auth, 404, "unknown_url"},
		{"shed", "", "", `{"model":"enc-1","input":["a","SHED"]}`, auth, 429, "overloaded"},
		{"not finite", "", "", `{"model":"enc-1","input":["NAN"]}`, auth, 500, "internal_error"},
		{"timeout", "", "", `{"model":"enc-1","input":["WAIT"]}`, append([]string{"X-Request-Timeout", "0.02"}, auth...), 504, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/embeddings"
			}
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(tc.body))
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error *struct {
					Message, Type string
					Code          *string
				}
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Code == nil {
				t.Fatalf("%s: body %s is not an OpenAI error (%v)", tc.name, b, err)
			}
			if resp.StatusCode != tc.status || *e.Error.Code != tc.code || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("%s: %d %s, want %d with code %s", tc.name, resp.StatusCode, b, tc.status, tc.code)
			}
			if resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: Content-Type %q", tc.name, resp.Header.Get("Content-Type"))
			}
			if (tc.status == 429) != (resp.Header.Get("Retry-After") != "") {
				t.Errorf("%s: Retry-After %q", tc.name, resp.Header.Get("Retry-After"))
			}
		})
	}
	// Every refusal was counted by its status.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "triage_encoder_requests_total" {
			for _, m := range mf.GetMetric() {
				counted += m.GetCounter().GetValue()
			}
		}
	}
	if counted != 24 { // all but the unknown path, which is no embeddings request
		t.Errorf("triage_encoder_requests_total sums to %v, want 24", counted)
	}
}

func TestReadyAndHealth(t *testing.T) {
	s, err := New(wordEncoder{}, Options{Model: "enc-1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/health"); got != 200 {
		t.Errorf("/health before ready = %d, want 200", got)
	}
	if got := get("/ready"); got != 503 {
		t.Errorf("/ready before ready = %d, want 503", got)
	}
	if code, b := post(t, srv.URL+"/v1/embeddings", `{"model":"enc-1","input":"a"}`); code != 503 || !strings.Contains(string(b), "not_ready") {
		t.Errorf("embeddings before ready = %d %s, want 503 not_ready", code, b)
	}
	s.SetReady(true)
	if got := get("/ready"); got != 200 {
		t.Errorf("/ready = %d, want 200", got)
	}
	if got := get("/metrics"); got != 404 {
		t.Errorf("/metrics without a registry = %d, want 404", got)
	}
	s.SetReady(false)
	if got := get("/ready"); got != 503 {
		t.Errorf("/ready draining = %d, want 503", got)
	}
}

func TestMetricsQueue(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(wordEncoder{}, Options{Model: "enc-1", Registry: reg, Stats: func() (classifier.RunStats, bool) {
		return classifier.RunStats{Queued: 7, Running: 1, Shed: 3, Batch: classifier.NewHistogram(classifier.BatchBounds...)}, true
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	srv := httptest.NewServer(s)
	defer srv.Close()
	post(t, srv.URL+"/v1/embeddings", `{"model":"enc-1","input":["a","b"]}`)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"triage_encoder_queue_texts 7", "triage_encoder_running 1", "triage_encoder_shed_texts_total 3",
		`triage_encoder_texts_total{outcome="ok"} 2`, `triage_encoder_requests_total{code="200"} 1`, "triage_encoder_batch_texts_bucket"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
}
