package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
)

// startEncoder runs "triage encode serve" on the default heads' tier-2
// encoder and waits for /ready.
func startEncoder(t *testing.T, heads, models string, extra ...string) *proc {
	t.Helper()
	startEncoderSkip(t)
	return startReady(t, "encoder", "/ready", append([]string{"encode", "serve", "--heads", heads, "--models", models}, extra...)...)
}

// startEncoderSkip skips t where encode serve cannot run its encoder.
func startEncoderSkip(t *testing.T) {
	t.Helper()
	if !onnx.Available() {
		t.Skip("a build without the ONNX runtime (the ort tag): encode serve has no encoder to run")
	}
	testenv.Models(t, "use-int8/encoder.json", "ort/libonnxruntime.so.1")
}

// TestEncodeServeSameDecisionsCLI: the rules decide the same on every text
// of dev with tier 2 served by a real "triage encode serve" process as
// with tier 2 in process: same heads, same encoder, the same text
// preparation on both sides.
func TestEncodeServeSameDecisionsCLI(t *testing.T) {
	skipHeavyUnderRace(t) // TestRemoteTier2SameDecisions samples dev under -race
	heads, models := defaultHeadsOrSkip(t)
	enc := startEncoder(t, heads, models)
	localCfg, remoteCfg := remoteConfigs(t, heads, models, "http://"+enc.addr, "use-lite-int8", "")
	sameDecisions(t, localCfg, remoteCfg, 1)
}

// TestEncodeServeProcess: the process answers as an OpenAI embeddings
// engine, refuses bad requests with OpenAI errors, shows its queue on
// /metrics, and on SIGTERM stops being ready and exits 0.
func TestEncodeServeProcess(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	t.Setenv("ENC_KEY", "k-123")
	p := startEncoder(t, heads, models, "--max-inputs", "4", "--api-key-env", "ENC_KEY")
	post := func(body, key string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, p.url("/v1/embeddings"), strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, b := post(`{"model":"use-lite-int8","input":["how do I rebase onto main","  WHAT IS A\tTORT  "]}`, "k-123")
	var a struct {
		Data []struct {
			Index     int
			Embedding []float32
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	if code != 200 || json.Unmarshal(b, &a) != nil || len(a.Data) != 2 || len(a.Data[1].Embedding) != 512 || a.Usage.PromptTokens < 8 {
		t.Fatalf("embeddings = %d %.300s, want 200 with two 512-dim vectors and their tokens", code, b)
	}
	for _, tc := range []struct {
		body, key string
		status    int
		code      string
	}{
		{`{"model":"use-lite-int8","input":"x"}`, "", 401, "invalid_api_key"},
		{`{"model":"bge-small-en-v1.5","input":"x"}`, "k-123", 404, "model_not_found"},
		{`{"model":"use-lite-int8","input":[]}`, "k-123", 400, "invalid_value"},
		{`{"model":"use-lite-int8","input":["a","b","c","d","e"]}`, "k-123", 400, "too_many_inputs"},
		{`{"model":"use-lite-int8","input":`, "k-123", 400, "invalid_json"},
	} {
		code, b := post(tc.body, tc.key)
		if code != tc.status || !strings.Contains(string(b), `"code":"`+tc.code+`"`) {
			t.Errorf("POST %s = %d %s, want %d %s", tc.body, code, b, tc.status, tc.code)
		}
	}
	// A request that gives less time than a Run takes is refused before
	// it runs: the scheduler's admission, through the real process.
	req, _ := http.NewRequest(http.MethodPost, p.url("/v1/embeddings"), strings.NewReader(`{"model":"use-lite-int8","input":"how do I rebase onto main"}`))
	req.Header.Set("Authorization", "Bearer k-123")
	req.Header.Set("X-Request-Timeout", "0.00001")
	shed, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := io.ReadAll(shed.Body)
	shed.Body.Close()
	if shed.StatusCode != 429 || shed.Header.Get("Retry-After") == "" || !strings.Contains(string(sb), `"code":"overloaded"`) {
		t.Errorf("a request with 10 µs to spare = %d %s, want 429 overloaded with Retry-After", shed.StatusCode, sb)
	}
	resp, err := http.Get(p.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"triage_encoder_queue_texts 0", `triage_encoder_texts_total{outcome="ok"} 2`, `triage_encoder_texts_total{outcome="shed"} 1`,
		`triage_encoder_requests_total{code="404"} 1`, `triage_encoder_requests_total{code="429"} 1`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.waitExit(t, 15*time.Second); code != 0 {
		t.Errorf("encode serve exited %d on SIGTERM, want 0\n%s", code, p.stderr.String())
	}
}
