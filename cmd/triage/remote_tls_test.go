package main

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/internal/testenv"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// TestRemoteEncoderTLSAndKey: the remote encoder's client trusts the CA
// bundle the rules name (relative to the rules file) and nothing else,
// and sends the API key from the environment variable they name.
func TestRemoteEncoderTLSAndKey(t *testing.T) {
	var auth string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"index":0,"embedding":[1,0,0,0]}]}`))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "engine-ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	man := onnx.Manifest{Format: 1, Name: "enc", Input: onnx.InputUSE, Pooling: onnx.PoolNone, Dims: 4, MaxTokens: 128, Tokenizer: "x"}
	embed := func(e *rules.RemoteEncoder) error {
		rc, err := lifecycle.RemoteConfig(e, rulesPath)
		if err != nil {
			return err
		}
		m, err := onnx.NewRemote(man, rc, onnx.Options{})
		if err != nil {
			return err
		}
		defer m.Close()
		_, err = m.Features(context.Background(), "text", nil)
		return err
	}

	t.Setenv("TEST_ENGINE_KEY", "s3cret")
	if err := embed(&rules.RemoteEncoder{URL: srv.URL, Model: "enc", CAFile: "engine-ca.pem", APIKeyEnv: "TEST_ENGINE_KEY"}); err != nil {
		t.Fatalf("with the engine's CA: %v", err)
	}
	if auth != "Bearer s3cret" {
		t.Errorf("Authorization = %q, want the key from $TEST_ENGINE_KEY", auth)
	}
	// The system roots do not know the engine's certificate.
	if err := embed(&rules.RemoteEncoder{URL: srv.URL, Model: "enc"}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	t.Setenv("TEST_ENGINE_KEY", "")
	err := embed(&rules.RemoteEncoder{URL: srv.URL, Model: "enc", CAFile: "engine-ca.pem", APIKeyEnv: "TEST_ENGINE_KEY"})
	if err == nil || !strings.Contains(err.Error(), "$TEST_ENGINE_KEY is empty or unset") {
		t.Errorf("with the key's variable empty: %v, want it named", err)
	}
	if err := embed(&rules.RemoteEncoder{URL: srv.URL, Model: "enc", CAFile: "missing.pem"}); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("with a missing CA file: %v, want it named", err)
	}
}

// TestRemoteEncoderRefusedAtLoad: rules whose remote engine serves
// another model than the heads were trained on are refused when they
// load, the message naming both; no call is made to find out.
func TestRemoteEncoderRefusedAtLoad(t *testing.T) {
	heads, models := defaultHeadsOrSkip(t)
	testenv.Models(t, "use-int8/encoder.json")
	dir := t.TempDir()
	rulesText := "alias: auto\nheads: " + heads + "\nroutes:\n  - {name: coding, when: {class: computer science}, pool: code}\ndefault: general\n" +
		"tier2: {enabled: true, encoder: {url: \"http://127.0.0.1:1\", model: bge-small-en-v1.5}}\n"
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rulesText), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := "listen: 127.0.0.1:0\ndefault_pool: general\nrules: rules.yaml\nmodels_dir: " + models + "\npools:\n" +
		"  - {name: general, model: m, replicas: [{url: \"http://127.0.0.1:9\"}]}\n  - {name: code, model: c, replicas: [{url: \"http://127.0.0.1:9\"}]}\n"
	if err := os.WriteFile(filepath.Join(dir, "triage.yaml"), []byte(gw), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&lifecycle.Models{}).Load(cfg)
	if err == nil || !strings.Contains(err.Error(), `"use-lite-int8"`) || !strings.Contains(err.Error(), `"bge-small-en-v1.5"`) {
		t.Fatalf("Load: %v, want a refusal naming both encoders", err)
	}
	t.Logf("refused: %v", err)
}
