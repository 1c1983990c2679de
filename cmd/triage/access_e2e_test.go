package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/triagegw/triage/internal/testenv"
)

// TestTenancyExample serves examples/tenancy (on free ports) and checks
// what its README shows: no key 401, the demo key 200 with the rate-limit
// headers, a model the trial group may not use 403; then keys created and
// revoked with `triage keys --config` apply to the running gateway.
func TestTenancyExample(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	models := testenv.Models(t, "tables/subjects-tier1.tbl", "tokenizer/bert-base-uncased.json")
	t.Parallel()
	ex := filepath.Join(root, "examples", "tenancy")
	readme, err := os.ReadFile(filepath.Join(ex, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	demo := regexp.MustCompile(`sk-triage-[0-9a-f]{8}-[0-9A-Za-z]{40}`).FindString(string(readme))
	if demo == "" {
		t.Fatal("the example's README shows no demo key")
	}
	cfg, err := os.ReadFile(filepath.Join(ex, "triage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := os.ReadFile(filepath.Join(ex, "keys.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// The example's config and keys in a temp dir (keys get created and
	// revoked below), its replicas on free ports, its paths absolute.
	dir := t.TempDir()
	text := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).ReplaceAllStringFunc(string(cfg), func(string) string { return "http://" + freeAddr(t) })
	text = strings.Replace(text, "rules: ../../rules.yaml", "rules: "+filepath.Join(root, "rules.yaml"), 1)
	text = strings.Replace(text, "models_dir: ../../var/models", "models_dir: "+models, 1)
	text = strings.Replace(text, "state_file: ../../var/tenancy-state.json", "state_file: state.json", 1)
	text = regexp.MustCompile(`(?m)^listen:.*$`).ReplaceAllString(text, "")
	cfgPath := filepath.Join(dir, "triage.yaml")
	writeFile(t, cfgPath, text)
	writeFile(t, filepath.Join(dir, "keys.jsonl"), string(keys))
	gw := startReady(t, "gateway", "/readyz", "serve", "--config", cfgPath, "--sim")
	c := newClient(t)
	post := func(key, model string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", gw.url("/v1/chat/completions"),
			strings.NewReader(`{"model":"`+model+`","max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post("", "auto"); r.StatusCode != 401 {
		t.Fatalf("no key: %d", r.StatusCode)
	}
	r := post(demo, "auto")
	if r.StatusCode != 200 || r.Header.Get("X-Ratelimit-Limit-Requests") != "60" || r.Header.Get("X-Ratelimit-Remaining-Requests") != "59" {
		t.Fatalf("the demo key: %d %v", r.StatusCode, r.Header)
	}
	if r.Header.Get("X-Ratelimit-Limit-Tokens") != "20000" {
		t.Fatalf("the demo key's token limit: %v", r.Header)
	}
	if r := post(demo, "saul-7b-instruct"); r.StatusCode != 403 {
		t.Fatalf("a model the trial group may not use: %d", r.StatusCode)
	}

	// A key made with the CLI works once the gateway has reloaded.
	code, stdout, stderr := runIn(t, dir, nil, "keys", "create", "--config", cfgPath, "--principal", "erin", "--groups", "staff")
	if code != 0 || !strings.HasPrefix(stdout, "sk-triage-") || !strings.Contains(stderr, "only copy") {
		t.Fatalf("keys create: %d %q %q", code, stdout, stderr)
	}
	erin := strings.TrimSpace(stdout)
	testenv.WaitWithin(t, 10*time.Second, "the new key to apply", func() (bool, string) {
		r := post(erin, "saul-7b-instruct")
		return r.StatusCode == 200, r.Status
	})
	code, stdout, _ = runIn(t, dir, nil, "keys", "list", "--config", cfgPath)
	if code != 0 || !strings.Contains(stdout, "erin") || !strings.Contains(stdout, "demo") || strings.Contains(stdout, erin[20:]) {
		t.Fatalf("keys list: %d\n%s", code, stdout)
	}
	id := erin[len("sk-triage-") : len("sk-triage-")+8]
	if code, stdout, stderr = runIn(t, dir, nil, "keys", "revoke", "--config", cfgPath, id); code != 0 {
		t.Fatalf("keys revoke: %d %s %s", code, stdout, stderr)
	}
	testenv.WaitWithin(t, 10*time.Second, "the revocation to apply", func() (bool, string) {
		r := post(erin, "auto")
		return r.StatusCode == 401, r.Status
	})
	if strings.Contains(gw.stderr.String()+gw.stdout.String(), erin[20:]) || strings.Contains(gw.stderr.String()+gw.stdout.String(), demo[20:]) {
		t.Fatal("a key's secret reached the gateway's output")
	}
}

// TestJWKSFileWatched: a JWKS file is watched as the keys file is: a key
// set rotated in the file applies to the running gateway, and a JWKS
// file caught empty mid-rewrite is rejected whole, the keys before
// staying in effect. So is a keys file truncated in place: the keys
// before stay.
func TestJWKSFileWatched(t *testing.T) {
	sim := startSim(t, "llama", "gen-0")
	dir := t.TempDir()
	type signer struct {
		kid  string
		priv ed25519.PrivateKey
	}
	newSigner := func(kid string) signer {
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		return signer{kid, priv}
	}
	jwks := func(s signer) string {
		x := base64.RawURLEncoding.EncodeToString(s.priv.Public().(ed25519.PublicKey))
		return `{"keys":[{"kty":"OKP","crv":"Ed25519","use":"sig","kid":"` + s.kid + `","x":"` + x + `"}]}`
	}
	sign := func(s signer) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": "ann", "iss": "https://idp.example", "aud": "triage", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = s.kid
		out, err := tok.SignedString(s.priv)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := newSigner("a"), newSigner("b")
	jwksPath, keysPath, cfgPath := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "keys.jsonl"), filepath.Join(dir, "triage.yaml")
	writeFile(t, jwksPath, jwks(a))
	code, stdout, stderr := runIn(t, dir, nil, "keys", "create", "--file", keysPath, "--principal", "svc")
	if code != 0 {
		t.Fatalf("keys create: %d %s %s", code, stdout, stderr)
	}
	svc := strings.TrimSpace(stdout)
	writeFile(t, cfgPath, `default_pool: general
pools:
  - {name: general, model: llama, replicas: [{url: "http://`+sim.addr+`"}], health: {enabled: false}}
access:
  keys_file: keys.jsonl
  jwt: {jwks_file: jwks.json, issuer: https://idp.example, audience: [triage]}
`)
	gw := startGateway(t, cfgPath)
	c := newClient(t)
	status := func(bearer string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", gw.url("/v1/chat/completions"), strings.NewReader(`{"model":"llama","max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if sa, sb := status(sign(a)), status(sign(b)); sa != 200 || sb != 401 {
		t.Fatalf("before the rotation: key a %d, key b %d; want 200, 401", sa, sb)
	}
	replaceFile(t, jwksPath, jwks(b))
	testenv.WaitWithin(t, 10*time.Second, "the rotated JWKS to apply", func() (bool, string) {
		sb := status(sign(b))
		return sb == 200, fmt.Sprint("key b ", sb)
	})
	if sa := status(sign(a)); sa != 401 {
		t.Fatalf("key a after the rotation: %d, want 401", sa)
	}
	// Caught empty: the reload is rejected, key b still verifies.
	writeFile(t, jwksPath, "")
	testenv.WaitWithin(t, 10*time.Second, "the reload of the empty JWKS file rejected", func() (bool, string) {
		return strings.Contains(gw.stderr.String(), "config reload rejected"), gw.stderr.String()
	})
	if sb := status(sign(b)); sb != 200 {
		t.Fatalf("key b after the JWKS file was caught empty: %d", sb)
	}
	writeFile(t, jwksPath, jwks(b))
	// The keys file truncated in place: the key before stays.
	if err := os.Truncate(keysPath, 0); err != nil {
		t.Fatal(err)
	}
	testenv.WaitWithin(t, 10*time.Second, "a reload of the truncated keys file", func() (bool, string) {
		return strings.Contains(gw.stderr.String(), "access.keys_file holds no key"), gw.stderr.String()
	})
	if s := status(svc); s != 200 {
		t.Fatalf("the API key after its file was truncated: %d, want 200", s)
	}
}
