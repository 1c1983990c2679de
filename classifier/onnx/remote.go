package onnx

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/classifier"
)

// A remote encoder is tier 2's encoder served by another process over
// the OpenAI embeddings API (POST /v1/embeddings), as vLLM serves an
// embedding model and Hugging Face text-embeddings-inference and Infinity
// do: texts in, one vector each out. It takes the local session's place
// under the same scheduler (sched.go): a text is admitted only if the
// call can end within its request's budget, texts that queue go as one
// call, and each call must end by the latest deadline of its texts. It is
// pure Go: this file builds with CGO_ENABLED=0.
//
// The heads name the encoder they were trained on (their model
// directory's encoder.json): the remote's model name must be that
// manifest's name, and its pooling and dimensions, when the
// configuration states them, the manifest's; every answer's vectors must
// have the manifest's dimensions. The engine tokenizes and truncates;
// it must cut texts to the manifest's max_tokens as the local encoder
// does (TEI --auto-truncate, vLLM's truncation) for the two to agree on
// long texts.
//
// A breaker stops calling an encoder that keeps failing: after
// RemoteConfig.Failures calls in a row fail (an error, a status other
// than 200 or 429, a malformed answer, or no answer by the deadline (or
// a 504) when no call has been answered for a Cooldown), texts are refused at once
// (classifier.ErrEncoderDown) for Cooldown; then calls go out again, and
// the first that fails opens it again. A 429 sheds the call's texts
// (classifier.ErrShed): the engine is up, refusing what it cannot do in
// the time the call gave it (X-Request-Timeout).
//
// No text and no answer body is ever put in an error: errors name the
// URL, the status and what was wrong with the answer.

// RemoteConfig is a remote encoder's configuration.
type RemoteConfig struct {
	// URL is the engine's base URL (http://host:port, or with /v1); the
	// request goes to its /v1/embeddings, or to URL itself when its path
	// ends in /embeddings.
	URL string
	// Model is the model name sent with each request: it must be the name
	// in the encoder manifest of the heads' model directory. Empty: that
	// name.
	Model string
	// Pooling and Dims, when set, are what the engine is known to serve
	// (how it pools, its vectors' length): checked against the manifest.
	Pooling string
	Dims    int
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// TLS is the client's TLS configuration (nil: Go's defaults).
	TLS *tls.Config
	// Timeout bounds a call that has no deadline of its own (offline
	// work). 0 means 30s.
	Timeout time.Duration
	// Failures is how many calls in a row must fail to open the breaker;
	// 0 means 5. Cooldown is how long it stays open; 0 means 5s.
	Failures int
	Cooldown time.Duration
}

// remote is the client of one remote encoder. It is safe for concurrent
// use.
type remote struct {
	url, model, key string
	shown           string // url without its query, for errors
	dims, maxTokens int
	client          *http.Client
	timeout         time.Duration
	br              breaker
	failed, refused atomic.Uint64 // texts
}

// embeddingsURL is where the requests go.
func embeddingsURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("url %q: want http:// or https:// and a host", base)
	}
	if u.User != nil {
		return "", fmt.Errorf("url %s: credentials go in api_key_env, not in the URL", u.Redacted())
	}
	p := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/embeddings"):
	case strings.HasSuffix(p, "/v1"):
		p += "/embeddings"
	default:
		p += "/v1/embeddings"
	}
	u.Path = p
	return u.String(), nil
}

// LoadRemote builds tier 2 from a heads artifact whose tier-2 encoder is
// served by a remote engine: it reads the encoder manifest of the model
// directory the heads name (the graph need not be there), refuses an
// engine whose model, pooling or dimensions are not the manifest's, and
// puts the tier-2 head on the remote encoder. With opts.Schedule,
// classifications with a deadline go through the scheduler
// (opts.MaxConcurrent calls at once, 0 meaning 4; opts.MaxBatch texts a
// call).
func LoadRemote(h *classifier.Heads, modelsDir string, rc RemoteConfig, opts Options) (*Classifier, error) {
	t := h.Tier2
	if t == nil {
		return nil, fmt.Errorf("onnx: heads %s have no tier-2 head", h.Dir)
	}
	if t.Encoder.Kind != "onnx" || t.Encoder.Model == "" {
		return nil, fmt.Errorf("onnx: heads %s: tier-2 encoder is %q with model directory %q, want onnx and a model directory whose encoder.json names the encoder", h.Dir, t.Encoder.Kind, t.Encoder.Model)
	}
	dir, err := h.Resolve(t.Encoder.Model, modelsDir)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	man := m.withDefaults()
	if t.Encoder.MaxTokens > 0 && t.Encoder.MaxTokens < man.MaxTokens {
		man.MaxTokens = t.Encoder.MaxTokens
	}
	md, err := NewRemote(man, rc, opts)
	if err != nil {
		return nil, fmt.Errorf("onnx: heads %s: %w", h.Dir, err)
	}
	head := t.Head
	c, err := NewClassifier(md, &head)
	if err != nil {
		md.Close()
		return nil, err
	}
	return c, nil
}

// OpenRemote is Open for an encoder a remote engine serves: the model
// directory dir gives its manifest (the graph need not be there), rc the
// engine, which must serve the manifest's model.
func OpenRemote(dir string, rc RemoteConfig, opts Options) (*Model, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	md, err := NewRemote(m.withDefaults(), rc, opts)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", dir, err)
	}
	return md, nil
}

// NewRemote builds a Model whose vectors come from the remote encoder rc
// describes, refusing one that does not serve the encoder man describes.
func NewRemote(man Manifest, rc RemoteConfig, opts Options) (*Model, error) {
	if rc.Model == "" {
		rc.Model = man.Name
	}
	switch {
	case rc.Model != man.Name:
		return nil, fmt.Errorf("trained on encoder %q, but the remote encoder serves model %q: serve %q there (vLLM --served-model-name) or train heads on %q", man.Name, rc.Model, man.Name, rc.Model)
	case rc.Pooling != "" && rc.Pooling != man.Pooling:
		return nil, fmt.Errorf("encoder %q pools by %q, but the remote encoder %q is configured to pool by %q", man.Name, man.Pooling, rc.Model, rc.Pooling)
	case rc.Dims != 0 && rc.Dims != man.Dims:
		return nil, fmt.Errorf("encoder %q gives %d dims, but the remote encoder %q is configured to give %d", man.Name, man.Dims, rc.Model, rc.Dims)
	}
	u, err := embeddingsURL(rc.URL)
	if err != nil {
		return nil, fmt.Errorf("remote encoder: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = rc.TLS
	tr.MaxIdleConnsPerHost = 64
	shown, _, _ := strings.Cut(u, "?")
	r := &remote{url: u, shown: shown, model: rc.Model, key: rc.APIKey, dims: man.Dims, maxTokens: man.MaxTokens,
		client: &http.Client{Transport: tr, CheckRedirect: noRedirects}, timeout: rc.Timeout}
	if r.timeout <= 0 {
		r.timeout = 30 * time.Second
	}
	r.br = breaker{failures: rc.Failures, cooldown: rc.Cooldown, now: time.Now}
	if r.br.failures <= 0 {
		r.br.failures = 5
	}
	if r.br.cooldown <= 0 {
		r.br.cooldown = 5 * time.Second
	}
	md := &Model{man: man, remote: r, maxText: man.MaxTokens}
	if opts.Schedule {
		o := opts.withDefaults()
		workers := opts.MaxConcurrent
		if workers <= 0 {
			workers = 4
		}
		if opts.QueueLen <= 0 {
			o.QueueLen = 32 * workers
		}
		// No nice and no CPU share: a call waits on the network, not a
		// core. The cost model starts at a loopback call's cost and
		// follows the calls' measured durations.
		cfg := schedConfig{workers: workers, maxBatch: o.MaxBatch, maxPadded: o.BatchTokens, queueLen: o.QueueLen, threads: 1}
		md.sched = newTextScheduler(cfg, md.runTexts, [2]costPoint{{8, 2 * time.Millisecond}, {64, 4 * time.Millisecond}})
	}
	return md, nil
}

// tlsHint says which setting a failed handshake points at: the CA trusted
// (the engine's certificate does not chain to it, or does not name the
// URL's host), or the client certificate an engine requiring one was not
// given ("" for other errors).
func tlsHint(err error) string {
	var verify *tls.CertificateVerificationError
	// The engine's alerts come back as remote errors, a type crypto/tls
	// does not export: their text is all there is.
	switch {
	case errors.As(err, &verify):
		return " (the engine's certificate does not verify against the CA bundle trusted: tier2.encoder.ca_file, --encoder-ca; the system roots without one)"
	case strings.Contains(err.Error(), "tls: certificate required"):
		return " (the engine requires a client certificate: tier2.encoder.cert_file and key_file, --encoder-cert and --encoder-key)"
	case strings.Contains(err.Error(), "tls: unknown certificate authority"), strings.Contains(err.Error(), "tls: bad certificate"):
		return " (the engine refused the client certificate: it is not signed by a CA the engine trusts)"
	}
	return ""
}

// noRedirects keeps texts and the API key with the configured URL: a
// redirect is answered as a failure (its status), never followed.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// estimateTokens is a text's tokens as admission and batching count them
// for a remote encoder, which tokenizes on its side: about four bytes a
// token, plus the special tokens, at most the encoder's max.
func (r *remote) estimateTokens(text string) int {
	return min(len(text)/4+2, r.maxTokens)
}

// runTexts is a remote Model's scheduled Run: one call for the batch,
// ending by deadline.
func (m *Model) runTexts(texts []string, dst [][]float32, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_, err := m.remote.embed(ctx, texts, dst)
	return err
}

// remoteFeatures is features for a remote Model.
// The text is prepared here (prepare.go), as the local encoder prepares
// it, so that an engine that knows nothing of it (vLLM, TEI) reads what
// the local encoder would; triage's own engine prepares again, which
// changes nothing (prepare is idempotent).
func (m *Model) remoteFeatures(ctx context.Context, text string, dst []float32) ([]float32, int, error) {
	r := m.remote
	if !r.br.allow() {
		r.refused.Add(1)
		return dst, 0, classifier.ErrEncoderDown
	}
	if b, changed := prepare(nil, text); changed {
		text = string(b) // the scheduler's job may outlive this call's buffers
	}
	n := r.estimateTokens(text)
	if dl, ok := ctx.Deadline(); ok && m.sched != nil {
		if m.sched.hopeless(dl) {
			return dst, 0, classifier.ErrShed
		}
		dst, err := m.sched.embedText(ctx, dl, text, n, dst, r.dims)
		return dst, n, err
	}
	dst = grow(dst, r.dims)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	// One text a call: the engine's usage, when it reports one, is the
	// text's tokens as it read them.
	used, err := r.embed(ctx, []string{text}, [][]float32{dst})
	if used > 0 {
		n = min(used, r.maxTokens)
	}
	return dst, n, err
}

// embeddingsRequest is the body of POST /v1/embeddings.
type embeddingsRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

// embeddingsResponse is what is read of its answer. Each embedding is
// base64 of little-endian float32s, as asked, or a JSON array of numbers
// from an engine that sends floats whatever it is asked.
type embeddingsResponse struct {
	Data []struct {
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Error json.RawMessage `json:"error"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// decodeEmbedding writes raw, an answer's embedding, into dst (of the
// vector's expected length) and returns its length as sent.
func decodeEmbedding(raw json.RawMessage, dst []float32) (int, error) {
	if len(raw) > 0 && raw[0] == '"' {
		// A JSON string of base64 has no escapes (its alphabet needs
		// none, though an encoder may write / as \/): decoded in place,
		// without a second pass of the JSON decoder.
		b64 := raw[1 : len(raw)-1]
		if bytes.IndexByte(b64, '\\') >= 0 {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return 0, err
			}
			b64 = []byte(s)
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
		n, err := base64.StdEncoding.Decode(b, b64)
		if err != nil {
			return 0, errors.New("an embedding that is not base64")
		}
		b = b[:n]
		if len(b)%4 != 0 || len(b)/4 != len(dst) {
			return len(b) / 4, nil
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return len(dst), nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, err
	}
	if len(v) == len(dst) {
		copy(dst, v)
	}
	return len(v), nil
}

// maxAnswer bounds an answer's body: a vector's floats as JSON text are
// at most about 16 bytes each.
func (r *remote) maxAnswer(texts int) int64 { return int64(texts)*int64(r.dims)*32 + 1<<16 }

// embed makes one call for texts, writing text i's unit-length vector
// into dst[i] (each of length dims), and tells the breaker how it went.
//
// An engine that answers 429 is up but refusing work it cannot do in
// time (triage's own engine, given the time left): its texts are shed
// (classifier.ErrShed, reason tier2_shed), as the local scheduler sheds
// them, and the breaker counts the answer as a sign of life, not a
// failure.
func (r *remote) embed(ctx context.Context, texts []string, dst [][]float32) (tokens int, err error) {
	err = r.call(ctx, texts, dst, &tokens)
	shed := errors.Is(err, classifier.ErrShed)
	switch {
	case err == nil || shed:
		r.br.record(callOK)
	case errors.Is(err, context.DeadlineExceeded):
		r.br.record(callLate)
	default:
		r.br.record(callFailed)
	}
	if err != nil && !shed {
		r.failed.Add(uint64(len(texts)))
	}
	return tokens, err
}

// call makes the call; usage gets the engine's prompt_tokens (0 when it
// reports none).
func (r *remote) call(ctx context.Context, texts []string, dst [][]float32, usage *int) error {
	// base64: a vector's 2 KiB of float32s instead of 5 KiB of decimals
	// to format and parse; OpenAI's own clients ask for it by default, so
	// the engines that speak the API answer it.
	body, err := json.Marshal(embeddingsRequest{Model: r.model, Input: texts, EncodingFormat: "base64"})
	if err != nil {
		return fmt.Errorf("onnx: remote encoder: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("onnx: remote encoder: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if dl, ok := ctx.Deadline(); ok {
		// How long the answer is worth waiting for: triage's own engine
		// refuses at once (429) texts it cannot encode in that time
		// instead of queueing work nobody will read.
		req.Header.Set("X-Request-Timeout", strconv.FormatFloat(max(time.Until(dl).Seconds(), 0.001), 'f', 3, 64))
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			// The deadline, not the engine, ended it: the caller's
			// budget is spent.
			return fmt.Errorf("onnx: remote encoder %s: no answer in time: %w", r.shown, ctx.Err())
		}
		return fmt.Errorf("onnx: remote encoder %s: %w%s", r.shown, errors.Unwrap(err), tlsHint(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return fmt.Errorf("onnx: remote encoder %s: status 429, overloaded: %w", r.shown, classifier.ErrShed)
	}
	if resp.StatusCode == http.StatusGatewayTimeout {
		// The engine ran out of the time the call gave it: the budget's
		// end, as when no answer comes (tier2_timeout).
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return fmt.Errorf("onnx: remote encoder %s: status 504, no answer in time: %w", r.shown, context.DeadlineExceeded)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return fmt.Errorf("onnx: remote encoder %s: status %d", r.shown, resp.StatusCode)
	}
	var ans embeddingsResponse
	lim := r.maxAnswer(len(texts))
	b, err := io.ReadAll(io.LimitReader(resp.Body, lim+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("onnx: remote encoder %s: no answer in time: %w", r.shown, ctx.Err())
	case err != nil:
		return fmt.Errorf("onnx: remote encoder %s: reading the answer: %w", r.shown, err)
	case int64(len(b)) > lim:
		return fmt.Errorf("onnx: remote encoder %s: an answer over %d bytes for %d texts", r.shown, lim, len(texts))
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		// The decoder's message names types and offsets, never values.
		return fmt.Errorf("onnx: remote encoder %s: the answer is not an embeddings list: %w", r.shown, err)
	}
	if len(ans.Error) > 0 && string(ans.Error) != "null" {
		return fmt.Errorf("onnx: remote encoder %s: status 200 with an error object", r.shown)
	}
	if len(ans.Data) != len(texts) {
		return fmt.Errorf("onnx: remote encoder %s: %d vectors for %d texts", r.shown, len(ans.Data), len(texts))
	}
	seen := make([]bool, len(texts))
	for k, d := range ans.Data {
		i := d.Index
		if i < 0 || i >= len(texts) || seen[i] {
			return fmt.Errorf("onnx: remote encoder %s: vector %d has index %d, for %d texts", r.shown, k, i, len(texts))
		}
		seen[i] = true
		n, err := decodeEmbedding(d.Embedding, dst[i][:r.dims])
		if err != nil {
			// Not the decoder's message, which can quote the answer.
			return fmt.Errorf("onnx: remote encoder %s: the answer is not an embeddings list: vector %d is neither base64 nor float32 numbers", r.shown, k)
		}
		if n != r.dims {
			return fmt.Errorf("onnx: remote encoder %s: a vector of %d dims, the heads take %d: is it serving model %q?", r.shown, n, r.dims, r.model)
		}
		var norm float64
		for _, v := range dst[i] {
			norm += float64(v) * float64(v)
		}
		if math.IsNaN(norm) || math.IsInf(norm, 0) || norm == 0 && texts[i] != "" {
			// The empty text may have the zero vector: the local USE
			// encoder gives it for a text without ids.
			return fmt.Errorf("onnx: remote encoder %s: vector %d is not finite and non-zero", r.shown, i)
		}
		if norm != 0 && math.Abs(norm-1) > 1e-3 {
			// A vector of unit length, to the float32 sums' rounding
			// (norm is the squared length), is kept as sent: triage's
			// own engine's are the local encoder's, bit for bit.
			classifier.L2Normalize(dst[i])
		}
	}
	*usage = max(ans.Usage.PromptTokens, 0)
	return nil
}

// breaker opens after a run of failed calls, refusing texts for a
// cooldown; then calls go out again, and one more failure opens it again.
//
// A call that had no answer by its deadline counts as a failure only when
// no call has been answered for a cooldown: an engine that answers others
// is slow under load, not down, and the late call's texts are the
// budget's (tier2_timeout), as in process. A hung engine still opens it,
// a cooldown after its last answer.
type breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time

	mu        sync.Mutex
	run       int       // failed calls in a row
	openUntil time.Time // zero: closed
	lastOK    time.Time // the last call answered
	opened    uint64
}

// A call's outcome, as the breaker counts it.
type callOutcome int

const (
	callOK     callOutcome = iota // answered (a 429 too: the engine is up)
	callLate                      // no answer by the deadline
	callFailed                    // refused, an error status, a malformed answer
)

func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntil.IsZero() || !b.now().Before(b.openUntil)
}

func (b *breaker) record(o callOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	switch {
	case o == callOK:
		b.run, b.openUntil, b.lastOK = 0, time.Time{}, now
		return
	case o == callLate && !b.lastOK.IsZero() && now.Sub(b.lastOK) < b.cooldown:
		return
	}
	b.run++
	if b.run >= b.failures {
		b.openUntil = now.Add(b.cooldown)
		b.run = b.failures - 1 // after the cooldown, one failure reopens it
		b.opened++
	}
}

// open reports whether the breaker refuses texts now.
func (b *breaker) open() bool { return !b.allow() }
