package sim

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Documented defaults applied by New to zero-valued Options fields.
const (
	defaultChunks        = 16
	defaultErrorStatus   = http.StatusInternalServerError
	defaultEmbeddingDims = 16
	defaultSeed          = 1

	maxModelLen  = 8192
	maxBodyBytes = 32 << 20
)

// The wire protocols a Server speaks, by the names Options.API takes.
const (
	// APIOpenAI is vLLM's OpenAI-compatible server.
	APIOpenAI = "openai"
	// APIAnthropic is api.anthropic.com's Messages API.
	APIAnthropic = "anthropic"
)

// Options configures a simulated vLLM replica. Zero values mean the
// documented defaults.
type Options struct {
	// Model is the served model name (required). Requests naming another
	// model get vLLM's 404; requests naming no model are served.
	Model string
	// Name is the replica name, sent as response header "X-Sim-Replica" and
	// used in generated text. Default: Model.
	Name string
	// Latency is the delay before the response headers: for JSON replies the
	// whole generation time, for streams the time to the first chunk.
	// Default 0.
	Latency time.Duration
	// Chunks is the number of content chunks (words) per response.
	// Default 16.
	Chunks int
	// ChunkDelay is the gap before each streamed content chunk. Default 0.
	ChunkDelay time.Duration
	// ErrorRate is the fraction [0,1] of POST requests answered with an
	// injected error before any byte of the body. Default 0.
	ErrorRate float64
	// ErrorStatus is the HTTP status of injected errors (400..599).
	// Default 500.
	ErrorStatus int
	// DropRate is the fraction [0,1] of streams cut off mid-way (after
	// Chunks/2 content chunks the connection is aborted, without the final
	// chunk and without "data: [DONE]"). Default 0.
	DropRate float64
	// Fault is the wire-level fault (one of [FaultNames]) answered to the
	// FaultRate fraction of POST requests. Default none.
	Fault string
	// FaultRate is the fraction [0,1] of valid POST requests answered with
	// Fault (for die-mid-stream: of streamed requests); it needs Fault.
	// Default 0.
	FaultRate float64
	// EmbeddingDims is the embedding vector size. Default 16.
	EmbeddingDims int
	// Seed seeds the random choices of ErrorRate, FaultRate and DropRate;
	// the choices are deterministic given the seed and the request order.
	// Default 1.
	Seed int64
	// API is the wire protocol served: "openai" (vLLM's OpenAI-compatible
	// endpoints) or "anthropic" (api.anthropic.com's Messages API, in place
	// of the OpenAI endpoints; /health is served either way). Default
	// "openai".
	API string
	// APIKey, when set, is the key the anthropic API requires, in the
	// x-api-key header or as "Authorization: Bearer". The openai API
	// ignores it. Default none: any key, or none, is accepted.
	APIKey string
	// Perf, when Enabled, models a vLLM replica's performance (Perf).
	Perf Perf
	// RequestLog, when set, gets one line per POST request once the
	// replica has decided how to answer it, before any wait: its
	// X-Request-Id, path, whether it streams and the answer ("ok", "error"
	// with its status, "invalid" with its status, "drop" with the chunk
	// count, "fault" with its name). Default none.
	RequestLog *slog.Logger
}

// RegisterFlags binds the options to flags of fs: -model, -name, -latency,
// -chunks, -chunk-delay, -error-rate, -error-status, -drop-rate, -fault,
// -fault-rate, -embedding-dims, -seed, -api and -api-key. The flags' default values are the current
// field values (normally zero, which New turns into the documented
// defaults stated in each help text).
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Model, "model", o.Model, "served model name, required (no default); requests naming another model get 404")
	fs.StringVar(&o.Name, "name", o.Name, "replica name, sent as X-Sim-Replica header and used in generated text (default: the model name)")
	fs.DurationVar(&o.Latency, "latency", o.Latency, "delay before response headers, a Go duration such as 50ms: whole generation time for JSON replies, time to first chunk for streams (default 0s)")
	fs.IntVar(&o.Chunks, "chunks", o.Chunks, "content chunks (words) per response, a count >= 1 (default 16; 0 means the default)")
	fs.DurationVar(&o.ChunkDelay, "chunk-delay", o.ChunkDelay, "gap before each streamed content chunk, a Go duration such as 10ms (default 0s)")
	fs.Float64Var(&o.ErrorRate, "error-rate", o.ErrorRate, "fraction 0..1 of requests answered with an injected error status (default 0)")
	fs.IntVar(&o.ErrorStatus, "error-status", o.ErrorStatus, "HTTP status code 400..599 of injected errors (default 500)")
	fs.Float64Var(&o.DropRate, "drop-rate", o.DropRate, "fraction 0..1 of streams aborted mid-way without final chunk and [DONE] (default 0)")
	fs.StringVar(&o.Fault, "fault", o.Fault, "wire-level fault answered to -fault-rate of the requests (default none; the X-Sim-Fault request header picks one for a single request); \"the answer\" is the reply the request would get, whole, framed by Content-Length; one of:\n"+faultHelp())
	fs.Float64Var(&o.FaultRate, "fault-rate", o.FaultRate, "fraction 0..1 of valid requests answered with -fault (die-mid-stream: of streamed requests) (default 0)")
	fs.IntVar(&o.EmbeddingDims, "embedding-dims", o.EmbeddingDims, "embedding vector size, a count of floats (default 16)")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of the random error, fault and drop choices, an integer (default 1; 0 means the default)")
	fs.StringVar(&o.API, "api", o.API, "wire protocol served: openai (vLLM's OpenAI-compatible endpoints) or anthropic (the Messages API of api.anthropic.com, POST /v1/messages) (default openai)")
	o.Perf.registerFlags(fs)
	fs.StringVar(&o.APIKey, "api-key", o.APIKey, "key that -api anthropic requires in the x-api-key request header or as Authorization: Bearer (default none: any key, or none, is accepted)")
}

// withDefaults returns o with zero fields replaced by the documented
// defaults.
func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = o.Model
	}
	if o.Chunks == 0 {
		o.Chunks = defaultChunks
	}
	if o.ErrorStatus == 0 {
		o.ErrorStatus = defaultErrorStatus
	}
	if o.EmbeddingDims == 0 {
		o.EmbeddingDims = defaultEmbeddingDims
	}
	if o.Seed == 0 {
		o.Seed = defaultSeed
	}
	if o.API == "" {
		o.API = APIOpenAI
	}
	if o.Perf.Enabled {
		o.Perf.withDefaults()
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if strings.TrimSpace(o.Model) == "" {
		errs = append(errs, errors.New("model is required"))
	}
	if o.Latency < 0 {
		errs = append(errs, fmt.Errorf("latency %v is negative", o.Latency))
	}
	if o.Chunks < 1 {
		errs = append(errs, fmt.Errorf("chunks %d must be >= 1", o.Chunks))
	}
	if o.ChunkDelay < 0 {
		errs = append(errs, fmt.Errorf("chunk delay %v is negative", o.ChunkDelay))
	}
	if !(o.ErrorRate >= 0 && o.ErrorRate <= 1) {
		errs = append(errs, fmt.Errorf("error rate %v must be in [0,1]", o.ErrorRate))
	}
	if o.ErrorStatus < 400 || o.ErrorStatus > 599 {
		errs = append(errs, fmt.Errorf("error status %d must be in 400..599", o.ErrorStatus))
	}
	if !(o.DropRate >= 0 && o.DropRate <= 1) {
		errs = append(errs, fmt.Errorf("drop rate %v must be in [0,1]", o.DropRate))
	}
	if o.Fault != "" && !knownFault(o.Fault) {
		errs = append(errs, fmt.Errorf("fault %q is not one of %s", o.Fault, strings.Join(FaultNames(), ", ")))
	}
	if !(o.FaultRate >= 0 && o.FaultRate <= 1) {
		errs = append(errs, fmt.Errorf("fault rate %v must be in [0,1]", o.FaultRate))
	}
	if o.FaultRate > 0 && o.Fault == "" {
		errs = append(errs, fmt.Errorf("fault rate %v needs a fault", o.FaultRate))
	}
	if o.EmbeddingDims < 1 {
		errs = append(errs, fmt.Errorf("embedding dims %d must be >= 1", o.EmbeddingDims))
	}
	if o.API != APIOpenAI && o.API != APIAnthropic {
		errs = append(errs, fmt.Errorf("api %q is not %s or %s", o.API, APIOpenAI, APIAnthropic))
	}
	if o.Perf.Enabled {
		errs = append(errs, o.Perf.validate())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: invalid options: %w", err)
	}
	return nil
}

// Stats are the counters of a Server. Only POST requests are counted.
// Every POST request that has ended is in exactly one of Completed,
// Cancelled, Injected, Dropped, Faults, or the requests rejected as invalid
// (4xx answers from validation, which have no counter of their own), so
// Requests = Active + Completed + Cancelled + Injected + Dropped + Faults +
// invalid. A request is counted as a fault once its fault is under way (a
// hang from its start, the others after the latency); a client that leaves
// before that counts as Cancelled.
type Stats struct {
	Requests  int64 // POST requests received
	Active    int64 // POST requests in progress (a hang stays active until its client leaves)
	Completed int64 // successful responses written in full
	Cancelled int64 // requests whose client went away before the response finished
	Injected  int64 // requests answered with an injected error (ErrorRate or X-Sim-Status)
	Dropped   int64 // streams aborted mid-way (DropRate or X-Sim-Drop-After)
	Faults    int64 // requests answered with a wire-level fault (FaultRate or X-Sim-Fault)
	Late      int64 // late-response's unsolicited responses written, once their connection sat idle
}

// Recorded is a POST request as received.
type Recorded struct {
	Path   string
	Header http.Header
	Body   []byte
}

// Server is a simulated vLLM replica. It is an http.Handler; all methods
// are safe for concurrent use.
type Server struct {
	opt     Options
	created int64 // unix start time, reported by /v1/models

	unhealthy atomic.Bool
	seq       atomic.Int64 // response id counter
	nonce     string       // this Server's part of the ids a client may send back

	responses responseStore // the Responses API's stored responses

	requests, active, completed, cancelled, injected, dropped, faults, late atomic.Int64

	rngMu sync.Mutex
	rng   *rand.Rand

	lastMu sync.Mutex
	last   Recorded

	kept takeover // connections kept open after a fault

	engine *engine // the performance model; nil when off
}

// New validates o (after applying defaults) and returns a healthy Server.
func New(o Options) (*Server, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	seed := uint64(o.Seed)
	s := &Server{
		opt:     o,
		created: time.Now().Unix(),
		// Random, not seeded: two replicas must not hand out the same
		// response id, or a previous_response_id sent to the wrong one
		// would find a conversation instead of a 404.
		nonce: fmt.Sprintf("%08x", rand.Uint32()),
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	if o.Perf.Enabled && o.API == APIOpenAI {
		s.engine = newEngine(o.Perf)
	}
	return s, nil
}

// SetHealthy sets the answer of GET /health: 200 when ok (the default),
// 503 when not.
func (s *Server) SetHealthy(ok bool) { s.unhealthy.Store(!ok) }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:  s.requests.Load(),
		Active:    s.active.Load(),
		Completed: s.completed.Load(),
		Cancelled: s.cancelled.Load(),
		Injected:  s.injected.Load(),
		Dropped:   s.dropped.Load(),
		Faults:    s.faults.Load(),
		Late:      s.late.Load(),
	}
}

// LastRequest returns a copy of the most recent POST request as received
// (the zero Recorded before the first one).
func (s *Server) LastRequest() Recorded {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	return Recorded{
		Path:   s.last.Path,
		Header: s.last.Header.Clone(),
		Body:   bytes.Clone(s.last.Body),
	}
}

func (s *Server) record(r *http.Request, body []byte) {
	rec := Recorded{Path: r.URL.Path, Header: r.Header.Clone(), Body: bytes.Clone(body)}
	s.lastMu.Lock()
	s.last = rec
	s.lastMu.Unlock()
}

// chance reports whether an event of probability p happens. Probabilities 0
// and 1 decide without consuming randomness.
func (s *Server) chance(p float64) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	s.rngMu.Lock()
	v := s.rng.Float64()
	s.rngMu.Unlock()
	return v < p
}

// ServeHTTP routes a request to the simulated endpoints of Options.API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Sim-Replica", s.opt.Name)
	if r.URL.Path == "/health" {
		if !s.allowMethod(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		if s.unhealthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.opt.API == APIAnthropic {
		s.serveAnthropic(w, r)
		return
	}
	switch r.URL.Path {
	case "/metrics":
		if s.engine == nil {
			s.fail(w, http.StatusNotFound, "Not Found: "+r.URL.Path)
			return
		}
		if s.allowMethod(w, r, http.MethodGet) {
			s.engine.serveMetrics(w, s.opt.Model)
		}
	case "/v1/models":
		if !s.allowMethod(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		s.handleModels(w)
	case "/v1/chat/completions":
		if s.allowMethod(w, r, http.MethodPost) {
			s.handlePost(w, r, endpointChat)
		}
	case "/v1/completions":
		if s.allowMethod(w, r, http.MethodPost) {
			s.handlePost(w, r, endpointCompletions)
		}
	case "/v1/embeddings":
		if s.allowMethod(w, r, http.MethodPost) {
			s.handlePost(w, r, endpointEmbeddings)
		}
	case "/v1/responses":
		if s.allowMethod(w, r, http.MethodPost) {
			s.handlePost(w, r, endpointResponses)
		}
	default:
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/responses/"); ok && id != "" && !strings.Contains(id, "/") {
			if s.allowMethod(w, r, http.MethodGet, http.MethodHead, http.MethodDelete) {
				s.handleStoredResponse(w, r, id)
			}
			return
		}
		s.fail(w, http.StatusNotFound, "Not Found: "+r.URL.Path)
	}
}

func (s *Server) allowMethod(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	s.fail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	return false
}

// fail answers status with the error shape of Options.API.
func (s *Server) fail(w http.ResponseWriter, status int, msg string) {
	if s.opt.API == APIAnthropic {
		writeAnthropicError(w, status, msg)
		return
	}
	writeError(w, status, msg)
}

// statusError is a request the endpoint refuses with a status other than
// 400, the status of every other validation error, or with an error type
// other than the status's.
type statusError struct {
	status int
	msg    string
	typ    string // vLLM's error type when it is not the status's
	param  string // the parameter at fault, when vLLM names it
}

func (e *statusError) Error() string { return e.msg }

// failInvalid answers the validation error err and returns its status.
func (s *Server) failInvalid(w http.ResponseWriter, err error) int {
	se, ok := errors.AsType[*statusError](err)
	switch {
	case !ok:
		s.fail(w, http.StatusBadRequest, err.Error())
		return http.StatusBadRequest
	case s.opt.API == APIOpenAI:
		writeStatusError(w, se)
	default:
		s.fail(w, se.status, se.msg)
	}
	return se.status
}

// uid returns an id no other Server hands out: the Server's nonce and a
// count, in hex.
func (s *Server) uid() string {
	return s.nonce + fmt.Sprintf("%08x", s.seq.Add(1))
}

type endpoint int

const (
	endpointChat endpoint = iota
	endpointCompletions
	endpointEmbeddings
	endpointResponses
	endpointMessages
)

// overrides are the per-request X-Sim-* header settings.
type overrides struct {
	latency    time.Duration
	chunks     int
	chunkDelay time.Duration
	status     int       // 0: none
	dropAfter  int       // -1: none
	fault      string    // "": none
	seq        *seqState // the performance model's sequence: paces the content
}

func (s *Server) parseOverrides(h http.Header) (overrides, error) {
	ov := overrides{
		latency:    s.opt.Latency,
		chunks:     s.opt.Chunks,
		chunkDelay: s.opt.ChunkDelay,
		dropAfter:  -1,
	}
	dur := func(name string, dst *time.Duration) error {
		v := h.Get(name)
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return fmt.Errorf("invalid %s header %q: want a non-negative Go duration such as 50ms", name, v)
		}
		*dst = d
		return nil
	}
	num := func(name string, dst *int, lo, hi int) error {
		v := h.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("invalid %s header %q: want an integer in %d..%d", name, v, lo, hi)
		}
		*dst = n
		return nil
	}
	err := errors.Join(
		dur("X-Sim-Latency", &ov.latency),
		num("X-Sim-Chunks", &ov.chunks, 1, 1<<20),
		dur("X-Sim-Chunk-Delay", &ov.chunkDelay),
		num("X-Sim-Status", &ov.status, 400, 599),
		num("X-Sim-Drop-After", &ov.dropAfter, 0, math.MaxInt32),
		faultHeader(h, &ov.fault),
	)
	return ov, err
}

func faultHeader(h http.Header, dst *string) error {
	v := strings.TrimSpace(h.Get("X-Sim-Fault"))
	if v == "" {
		return nil
	}
	if !knownFault(v) {
		return fmt.Errorf("invalid X-Sim-Fault header %q: want one of %s", v, strings.Join(FaultNames(), ", "))
	}
	*dst = v
	return nil
}

// job is a validated POST request: what the endpoint is asked for.
type job struct {
	ep     endpoint
	gen    generation        // chat and completions
	inputs []any             // embeddings
	base64 bool              // embeddings
	resp   *responsesRequest // responses
	msg    *messagesRequest  // messages
}

// stream reports whether the answer to p is an event stream.
func (p job) stream() bool {
	switch p.ep {
	case endpointChat, endpointCompletions:
		return p.gen.stream
	case endpointResponses:
		return p.resp.stream
	case endpointMessages:
		return p.msg.stream
	}
	return false
}

// parseJob validates the body of a POST to ep; it also returns the model
// the request names.
func (s *Server) parseJob(ep endpoint, body []byte) (p job, model string, err error) {
	p.ep = ep
	switch ep {
	case endpointChat, endpointCompletions:
		p.gen, model, err = parseGeneration(ep, body)
	case endpointEmbeddings:
		p.inputs, p.base64, model, err = parseEmbeddings(body)
	case endpointResponses:
		p.resp, model, err = s.parseResponses(body)
	case endpointMessages:
		p.msg, model, err = parseMessages(body)
	}
	if err == nil && ep != endpointMessages {
		p.gen.salt, err = cacheSalt(body)
	}
	return p, model, err
}

// handlePost runs the common part of every POST endpoint: counting,
// recording, header overrides, error injection, validation, the choice of
// fault or drop; then the endpoint itself.
func (s *Server) handlePost(w http.ResponseWriter, r *http.Request, ep endpoint) {
	s.requests.Add(1)
	s.active.Add(1)
	defer s.active.Add(-1)
	logged := func(answer string, attrs ...any) {
		if s.opt.RequestLog != nil {
			s.logPost(r, answer, attrs...)
		}
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	s.record(r, body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			logged("invalid", "status", http.StatusRequestEntityTooLarge)
			s.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
			return
		}
		if r.Context().Err() != nil {
			s.cancelled.Add(1)
			return
		}
		logged("invalid", "status", http.StatusBadRequest)
		s.fail(w, http.StatusBadRequest, "error reading request body: "+err.Error())
		return
	}
	if ep == endpointMessages {
		// api.anthropic.com looks at the credentials and the version
		// before anything else.
		if err := s.checkAnthropicHeaders(r.Header); err != nil {
			logged("invalid", "status", err.status)
			s.fail(w, err.status, err.msg)
			return
		}
	}

	ov, err := s.parseOverrides(r.Header)
	if err != nil {
		logged("invalid", "status", http.StatusBadRequest)
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	if ov.status != 0 {
		s.injected.Add(1)
		logged("error", "status", ov.status)
		s.fail(w, ov.status, fmt.Sprintf("injected error %d (X-Sim-Status) from sim replica %s", ov.status, s.opt.Name))
		return
	}
	if s.chance(s.opt.ErrorRate) {
		s.injected.Add(1)
		logged("error", "status", s.opt.ErrorStatus)
		s.fail(w, s.opt.ErrorStatus, fmt.Sprintf("injected error %d from sim replica %s", s.opt.ErrorStatus, s.opt.Name))
		return
	}

	p, model, err := s.parseJob(ep, body)
	if err != nil {
		logged("invalid", "status", s.failInvalid(w, err))
		return
	}
	if !s.checkModel(w, model) {
		logged("invalid", "status", http.StatusNotFound)
		return
	}

	stream := p.stream()
	fault := ov.fault
	if fault == "" && (s.opt.Fault != FaultDieMidStream || stream) && s.chance(s.opt.FaultRate) {
		fault = s.opt.Fault
	}
	dropAfter := -1
	switch {
	case !stream:
		if fault == FaultDieMidStream {
			fault = "" // a stream fault: a single JSON reply is served whole
		}
	case fault == FaultDieMidStream:
		dropAfter = ov.dropAfter
		if dropAfter < 0 {
			dropAfter = ov.chunks / 2
		}
	case fault == "":
		dropAfter = ov.dropAfter
		if dropAfter < 0 && s.chance(s.opt.DropRate) {
			dropAfter = ov.chunks / 2
		}
	}
	switch {
	case fault != "":
		logged("fault", "stream", stream, "fault", fault)
	case dropAfter >= 0:
		logged("drop", "stream", stream, "after", dropAfter)
	default:
		logged("ok", "stream", stream)
	}

	if fault != "" && fault != FaultDieMidStream {
		s.serveFault(w, r, fault, p, ov)
		return
	}
	if s.engine != nil && (ep == endpointChat || ep == endpointCompletions) {
		var answer []byte
		if p.gen.chat && p.gen.call == nil {
			answer = append(append([]byte("assistant: "), s.content(ov.chunks)...), '\n')
		}
		q, err := s.engine.submit(p.gen.prompt, answer, p.gen.salt, ov.chunks)
		if err != nil { // vLLM's answer to a prompt beyond max_model_len
			s.fail(w, http.StatusBadRequest, err.Error())
			return
		}
		defer s.engine.leave(q) // a no-op once it has ended
		select {
		case <-q.admit:
		case <-r.Context().Done():
			s.cancelled.Add(1)
			return
		}
		p.gen.promptTokens, p.gen.cached, p.gen.perf = q.prompt, q.cached, true
		if !q.next(r.Context()) { // the first token
			s.cancelled.Add(1)
			return
		}
		ov.seq = q
	}
	if !sleepCtx(r.Context(), ov.latency) {
		s.cancelled.Add(1)
		return
	}
	switch {
	case stream:
		s.stream(w, r, s.newEvents(p, ov), ov, dropAfter, fault == FaultDieMidStream)
	default:
		if ov.seq != nil { // the whole generation comes before a JSON answer
			select {
			case <-ov.seq.finish:
			case <-r.Context().Done():
				s.cancelled.Add(1)
				return
			}
		}
		v := s.answerValue(p, ov)
		if err := writeJSON(w, http.StatusOK, v); err != nil || r.Context().Err() != nil {
			s.cancelled.Add(1)
			return
		}
		s.completed.Add(1)
	}
}

// logPost writes the RequestLog line of a POST request.
func (s *Server) logPost(r *http.Request, answer string, attrs ...any) {
	args := append([]any{"request_id", r.Header.Get("X-Request-Id"), "path", r.URL.Path, "answer", answer}, attrs...)
	s.opt.RequestLog.Info("post", args...)
}

// sleepCtx waits d or until ctx is done; it reports whether ctx is still
// live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
