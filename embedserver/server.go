package embedserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/openai"
)

// Encoder is what a Server serves: a sentence encoder whose Encode is
// safe for concurrent use.
type Encoder interface {
	// Encode returns text's unit-length vector (in dst if it has room)
	// and how many of its tokens the encoder read, within ctx's
	// deadline: classifier.ErrShed when it would not finish by it.
	Encode(ctx context.Context, text string, dst []float32) ([]float32, int, error)
	// Dims is the vectors' length.
	Dims() int
}

// Options configure a Server. Every zero value has the default stated.
type Options struct {
	// Model is the model name requests must name (the encoder manifest's
	// name, which heads record). Required.
	Model string
	// Timeout bounds each request's texts: a text that cannot finish in
	// it is refused (429) before it runs. A client's X-Request-Timeout
	// header (seconds, as a decimal) lowers it. Default 10s.
	Timeout time.Duration
	// MaxInputs is the most texts a request may carry; default 256.
	MaxInputs int
	// MaxTextBytes is the longest text, in bytes; default 64 KiB. (The
	// encoder reads at most its max_tokens of it; the gateway's window
	// sends at most its window.max_bytes, 16 KiB by default.)
	MaxTextBytes int
	// MaxBodyBytes is the largest request body; default 16 MiB.
	MaxBodyBytes int64
	// APIKey, when set, is the bearer token every request to
	// /v1/embeddings must carry (401 otherwise).
	APIKey string
	// Stats, when set, reads the encoder's scheduler (its queue, Runs,
	// shed texts) for /metrics.
	Stats func() (classifier.RunStats, bool)
	// Registry is where the metrics are registered (nil: none are kept,
	// and /metrics answers 404).
	Registry *prometheus.Registry
	// Log receives one line per failed request (nil: slog.Default()). No
	// text is ever logged.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxInputs <= 0 {
		o.MaxInputs = 256
	}
	if o.MaxTextBytes <= 0 {
		o.MaxTextBytes = 64 << 10
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// Server is the HTTP handler of an encoder service:
//
//	POST /v1/embeddings   (also /embeddings) the OpenAI embeddings API
//	GET  /v1/models       the one model served
//	GET  /health          200 while the process serves
//	GET  /ready           200 once ready and until draining (SetReady)
//	GET  /metrics         Prometheus metrics (with a Registry)
type Server struct {
	enc     Encoder
	o       Options
	mux     *http.ServeMux
	ready   atomic.Bool
	m       *metrics
	scratch sync.Pool // *[]byte: an answer's body
}

// New builds a Server for enc. It is not ready until SetReady(true).
func New(enc Encoder, o Options) (*Server, error) {
	if enc == nil {
		return nil, errors.New("embedserver: no encoder")
	}
	if o.Model == "" {
		return nil, errors.New("embedserver: no model name")
	}
	o = o.withDefaults()
	s := &Server{enc: enc, o: o, mux: http.NewServeMux()}
	s.scratch.New = func() any { b := make([]byte, 0, 8<<10); return &b }
	if o.Registry != nil {
		var err error
		if s.m, err = newMetrics(o.Registry, o.Stats); err != nil {
			return nil, err
		}
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}))
	}
	s.mux.HandleFunc("/v1/embeddings", s.embeddings)
	s.mux.HandleFunc("/embeddings", s.embeddings)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return s, nil
}

// SetReady says whether /ready answers 200: true once the encoder is
// loaded, false when draining before shutdown.
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, pattern := s.mux.Handler(r); pattern != "" {
		h.ServeHTTP(w, r)
		return
	}
	openai.WriteError(w, openai.NotFound(r.Method, r.URL.Path))
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	b, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{"id": s.o.Model, "object": "model", "owned_by": "triage"}}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// request is what is read of an embeddings request. Fields the API has
// and the server does not need (user) are ignored.
type request struct {
	Model          *string         `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

func invalid(param, code, msg string) *openai.Error {
	return &openai.Error{Status: http.StatusBadRequest, Message: msg, Type: openai.TypeInvalidRequest, Param: param, Code: code}
}

// parse reads and checks an embeddings request: its texts and whether
// the vectors go as base64.
func (s *Server) parse(body []byte) (texts []string, b64 bool, e *openai.Error) {
	var req request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, false, invalid("", "invalid_json", "request body is not a valid JSON object: "+jsonProblem(err))
	}
	if dec.More() {
		return nil, false, invalid("", "invalid_json", "request body has data after its JSON object")
	}
	switch {
	case req.Model == nil:
		return nil, false, invalid("model", "missing_required_parameter", "'model' is required")
	case *req.Model != s.o.Model:
		return nil, false, openai.ModelNotFound(*req.Model)
	}
	if req.EncodingFormat != nil {
		switch *req.EncodingFormat {
		case "float":
		case "base64":
			b64 = true
		default:
			return nil, false, invalid("encoding_format", "invalid_value", "'encoding_format' must be \"float\" or \"base64\"")
		}
	}
	if req.Dimensions != nil && *req.Dimensions != s.enc.Dims() {
		return nil, false, invalid("dimensions", "invalid_value", "model '"+s.o.Model+"' gives "+strconv.Itoa(s.enc.Dims())+" dimensions; 'dimensions' can only be that")
	}
	in := bytes.TrimSpace(req.Input)
	switch {
	case len(in) == 0 || string(in) == "null":
		return nil, false, invalid("input", "missing_required_parameter", "'input' is required")
	case in[0] == '"':
		var t string
		if err := json.Unmarshal(in, &t); err != nil {
			return nil, false, invalid("input", "invalid_type", "'input' must be a string or an array of strings")
		}
		texts = []string{t}
	case in[0] == '[':
		if err := json.Unmarshal(in, &texts); err != nil {
			var ids []json.RawMessage
			if json.Unmarshal(in, &ids) == nil && len(ids) > 0 && (ids[0][0] == '[' || ids[0][0] >= '0' && ids[0][0] <= '9') {
				return nil, false, invalid("input", "invalid_type", "'input' as token ids is not accepted: this encoder tokenizes text itself; send strings")
			}
			return nil, false, invalid("input", "invalid_type", "'input' must be a string or an array of strings")
		}
		if len(texts) == 0 {
			return nil, false, invalid("input", "invalid_value", "'input' must not be an empty array")
		}
	default:
		return nil, false, invalid("input", "invalid_type", "'input' must be a string or an array of strings")
	}
	if len(texts) > s.o.MaxInputs {
		return nil, false, invalid("input", "too_many_inputs", fmt.Sprintf("'input' has %d texts; at most %d a request", len(texts), s.o.MaxInputs))
	}
	for i, t := range texts {
		if len(t) > s.o.MaxTextBytes {
			return nil, false, invalid("input", "input_too_long", fmt.Sprintf("'input' text %d is %d bytes; at most %d", i, len(t), s.o.MaxTextBytes))
		}
	}
	return texts, b64, nil
}

// jsonProblem describes a decoding error by type and offset, never by the
// value read.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return se.Error() + " (at byte " + strconv.FormatInt(se.Offset, 10) + ")"
	case errors.As(err, &te):
		return "field " + strconv.Quote(te.Field) + " must be " + te.Type.String()
	case errors.Is(err, io.EOF):
		return "empty body"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends inside its JSON"
	}
	return "malformed"
}

// deadline is when a request's texts must be done: now plus Timeout, or
// the client's X-Request-Timeout (seconds) when shorter.
func (s *Server) deadline(r *http.Request, now time.Time) time.Time {
	d := s.o.Timeout
	if v := r.Header.Get("X-Request-Timeout"); v != "" {
		if sec, err := strconv.ParseFloat(v, 64); err == nil && sec > 0 && !math.IsInf(sec, 0) && sec*float64(time.Second) < float64(d) {
			d = time.Duration(sec * float64(time.Second))
		}
	}
	return now.Add(d)
}

func (s *Server) fail(w http.ResponseWriter, e *openai.Error, start time.Time) {
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	openai.WriteError(w, e)
	s.m.request(e.Status, start)
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, openai.MethodNotAllowed(r.Method, r.URL.Path), start)
		return
	}
	if k := s.o.APIKey; k != "" {
		got, ok := bearer(r.Header.Get("Authorization"))
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(k)) != 1 {
			s.fail(w, &openai.Error{Status: http.StatusUnauthorized, Message: "a valid API key is required (Authorization: Bearer ...)", Type: openai.TypeAuthentication, Code: "invalid_api_key"}, start)
			return
		}
	}
	if !s.ready.Load() {
		s.fail(w, &openai.Error{Status: http.StatusServiceUnavailable, Message: "the encoder is not ready (loading or draining); retry", Type: openai.TypeServer, Code: "not_ready"}, start)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			s.fail(w, openai.TooLarge(s.o.MaxBodyBytes), start)
			return
		}
		s.fail(w, openai.BadRequest("the request body could not be read"), start)
		return
	}
	texts, b64, e := s.parse(body)
	if e != nil {
		s.fail(w, e, start)
		return
	}
	ctx, cancel := context.WithDeadline(r.Context(), s.deadline(r, start))
	defer cancel()
	vecs, tokens, err := s.encode(ctx, texts)
	if err != nil {
		switch {
		case errors.Is(err, classifier.ErrShed):
			s.fail(w, &openai.Error{Status: http.StatusTooManyRequests, Message: "the encoder is overloaded: its queue would not reach these texts in time; retry later", Type: openai.TypeRateLimit, Code: "overloaded"}, start)
		case r.Context().Err() != nil:
			s.m.request(499, start) // the client left: nobody reads an answer
		case errors.Is(err, context.DeadlineExceeded):
			s.fail(w, &openai.Error{Status: http.StatusGatewayTimeout, Message: "the texts were not encoded in time", Type: openai.TypeServer, Code: "timeout"}, start)
		default:
			s.o.Log.Error("encode", "err", err, "texts", len(texts))
			s.fail(w, &openai.Error{Status: http.StatusInternalServerError, Message: "the encoder failed", Type: openai.TypeServer, Code: "internal_error"}, start)
		}
		return
	}
	bp := s.scratch.Get().(*[]byte)
	out := appendAnswer((*bp)[:0], s.o.Model, vecs, tokens, b64)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
	if cap(out) <= 1<<20 {
		*bp = out
		s.scratch.Put(bp)
	}
	s.m.request(http.StatusOK, start)
}

func bearer(h string) (string, bool) {
	const p = "Bearer "
	if len(h) > len(p) && (h[:len(p)] == p || h[:len(p)] == "bearer ") {
		return h[len(p):], true
	}
	return "", false
}

// encode encodes texts at once, each submitted on its own so that the
// encoder's scheduler batches them with other requests' texts. The first
// error cancels the others.
func (s *Server) encode(ctx context.Context, texts []string) ([][]float32, int, error) {
	vecs := make([][]float32, len(texts))
	if len(texts) == 1 {
		v, n, err := s.enc.Encode(ctx, texts[0], nil)
		if err == nil && !finite(v) {
			err = errors.New("embedserver: the encoder gave a vector that is not finite")
		}
		s.m.texts(1, err)
		vecs[0] = v
		return vecs, n, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tokens := make([]int, len(texts))
	errs := make([]error, len(texts))
	var wg sync.WaitGroup
	for i, t := range texts {
		wg.Go(func() {
			var err error
			vecs[i], tokens[i], err = s.enc.Encode(ctx, t, nil)
			if err != nil {
				errs[i] = err
				cancel()
			}
		})
	}
	wg.Wait()
	total := 0
	var first error
	for i, err := range errs {
		total += tokens[i]
		if err == nil && !finite(vecs[i]) {
			err = errors.New("embedserver: the encoder gave a vector that is not finite")
			errs[i] = err
		}
		s.m.texts(1, err)
		// The cause, not a text cancelled because another failed.
		if err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return vecs, total, first
}

func finite(v []float32) bool {
	for _, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return false
		}
	}
	return true
}

// appendAnswer appends the embeddings list, each vector as JSON floats
// (the shortest decimal that reads back as the same float32) or as
// base64 of its little-endian float32s.
func appendAnswer(b []byte, model string, vecs [][]float32, tokens int, b64 bool) []byte {
	b = append(b, `{"object":"list","data":[`...)
	var raw []byte
	for i, v := range vecs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		if b64 {
			raw = raw[:0]
			for _, f := range v {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for k, f := range v {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	mb, _ := json.Marshal(model)
	b = append(b, mb...)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	return append(b, "}}\n"...)
}
