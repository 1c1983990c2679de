package router

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/h1"
	"github.com/triagegw/triage/router/metrics"
	"github.com/triagegw/triage/router/proxy"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/tenancy"
)

// MetricsHandler serves the gateway's metrics, as /metrics does.
func (g *Gateway) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

func (g *Gateway) newEngine() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true // c.Done() and friends follow the request's context
	e.Use(g.recovery)
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		e.POST(p, g.forward)
	}
	e.POST("/v1/messages", g.messages)
	e.POST("/v1/responses", g.createResponse)
	e.GET("/v1/responses/*rest", g.storedResponse)
	e.DELETE("/v1/responses/*rest", g.storedResponse)
	e.POST("/v1/responses/*rest", g.storedResponse) // cancel
	// Every GET answers HEAD too, as net/http's own handlers do: the same
	// status and headers, and the server drops the body.
	get := func(path string, h gin.HandlerFunc) {
		e.GET(path, h)
		e.HEAD(path, h)
	}
	get("/v1/models", g.models)
	get("/v1/models/*model", g.model)
	get("/healthz", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", []byte(`{"status":"ok"}`)) })
	get("/readyz", g.readyz)
	if !g.metricsApart {
		get("/metrics", gin.WrapH(g.MetricsHandler()))
	}
	e.NoRoute(func(c *gin.Context) {
		openai.WriteError(c.Writer, openai.NotFound(c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		openai.WriteError(c.Writer, openai.MethodNotAllowed(c.Request.Method, c.Request.URL.Path))
	})
	return e
}

// recovery turns a panic into a 500 when nothing was sent yet, or aborts
// the connection when something was, so a broken response never looks
// complete. http.ErrAbortHandler passes through untouched: it is how a
// handler asks the server to cut the connection.
func (g *Gateway) recovery(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		g.log.Error("panic in handler", "path", c.Request.URL.Path, "panic", v, "stack", string(debug.Stack()))
		if c.Writer.Written() {
			panic(http.ErrAbortHandler)
		}
		openai.WriteError(c.Writer, openai.Internal())
	}()
	c.Next()
}

// models lists the model names a client may send. With access control on
// it needs a credential, as every OpenAI endpoint does, and lists only
// what the caller may name: another tenant's private pool is not shown.
func (g *Gateway) models(c *gin.Context) {
	s := g.snap.Load()
	if s.access == nil {
		c.Data(http.StatusOK, "application/json", s.modelList)
		return
	}
	caller, ok := g.authenticate(c, s)
	if !ok {
		return
	}
	mine := make([]listedModel, 0, len(s.listed))
	for i := range s.listed {
		if mayName(caller, &s.listed[i]) {
			mine = append(mine, s.listed[i])
		}
	}
	c.Data(http.StatusOK, "application/json", renderModels(mine))
}

// model describes one model name; with access control, only one the caller
// may name (any other is not found, as one that does not exist).
func (g *Gateway) model(c *gin.Context) {
	s := g.snap.Load()
	name := c.Param("model")[1:] // "/name" → "name"; names may hold slashes
	var caller tenancy.Caller
	if s.access != nil {
		var ok bool
		if caller, ok = g.authenticate(c, s); !ok {
			return
		}
	}
	i, found := slices.BinarySearchFunc(s.listed, name, func(m listedModel, name string) int { return strings.Compare(m.ID, name) })
	if !found || s.access != nil && !mayName(caller, &s.listed[i]) {
		openai.WriteError(c.Writer, openai.ModelNotFound(name))
		return
	}
	m := s.listed[i]
	c.JSON(http.StatusOK, gin.H{"id": name, "object": "model", "created": s.loadedAt.Unix(), "owned_by": "triage", "root": m.Root})
}

// authenticate checks the credential of a request that reads the gateway's
// own state (no body, no limits): on a refusal it writes the answer, in
// OpenAI's shape, and logs the request.
func (g *Gateway) authenticate(c *gin.Context, s *snapshot) (tenancy.Caller, bool) {
	start := time.Now()
	caller, d := s.access.Authenticate(c.Request.Header, start)
	if d == nil {
		return caller, true
	}
	al := accessLine{id: requestID(c.Request.Header)[0], path: c.Request.URL.Path, start: start}
	g.deny(c.Writer, shapeOpenAI, &al, d)
	g.account(s, &al)
	return caller, false
}

func (g *Gateway) readyz(c *gin.Context) {
	s := g.snap.Load()
	status, code := "ready", http.StatusOK
	switch {
	case g.draining.Load():
		status, code = "draining", http.StatusServiceUnavailable
	case c.Query("upstreams") != "ignore" && !g.Ready():
		// ?upstreams=ignore: ready to answer whatever the replicas' state,
		// for a balancer that should keep a gateway whose replicas are
		// down (it answers 503 in the client's shape).
		status, code = "no healthy upstream", http.StatusServiceUnavailable
	}
	body := gin.H{"status": status, "config_version": s.version}
	if s.rules != nil {
		body["rules_version"] = s.rules.Version()
		body["tier2"] = s.rules.Tier2State()
	}
	c.JSON(code, body)
}

// forward handles the OpenAI endpoints: read the body once, find the
// pool, forward, account.
func (g *Gateway) forward(c *gin.Context) { g.serve(c, shapeOpenAI) }

// messages handles Anthropic's Messages endpoint: the body becomes a chat
// completion, which is routed and forwarded as one, and the answer (or
// stream) is translated back on its way out.
func (g *Gateway) messages(c *gin.Context) { g.serve(c, shapeMessages) }

// createResponse handles OpenAI's Responses endpoint: routed by the
// subject of its input items, passed through to a pool that serves it, and
// remembered by id so that a chain (previous_response_id) and later reads
// go back where the response lives.
func (g *Gateway) createResponse(c *gin.Context) { g.serve(c, shapeResponses) }

// deny answers a request access control refused, in OpenAI's shape:
// 401, 403, or 429 with Retry-After.
func (g *Gateway) deny(w http.ResponseWriter, sh shape, al *accessLine, d *tenancy.Denial) {
	typ := openai.TypePermission
	switch d.Status {
	case http.StatusBadRequest:
		typ = openai.TypeInvalidRequest
	case http.StatusUnauthorized:
		typ = openai.TypeAuthentication
	case http.StatusTooManyRequests:
		typ = openai.TypeRateLimit
		w.Header()["Retry-After"] = []string{strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10)}
	}
	oe := &openai.Error{Status: d.Status, Message: d.Message, Type: typ, Code: d.Code}
	al.status, al.err = oe.Status, oe
	if al.trace != nil {
		al.trace.denied(d)
	}
	g.metrics.Limited(d.Code)
	sh.writeError(w, oe)
}

// rateHeaders sets OpenAI's x-ratelimit-*-requests and *-tokens headers
// from the tightest requests- and tokens-per-minute limits that apply:
// the values are cut from one string and the headers' slices from one
// array (two allocations, not twelve).
func rateHeaders(h http.Header, a *tenancy.Admission) {
	if a.Limit == 0 && a.TokLimit == 0 {
		return
	}
	var buf [128]byte
	b := buf[:0]
	var ends [6]int
	n := 0
	add := func(limit, remaining int, reset time.Duration) {
		b = strconv.AppendInt(b, int64(limit), 10)
		ends[n] = len(b)
		b = strconv.AppendInt(b, int64(remaining), 10)
		ends[n+1] = len(b)
		b = appendReset(b, reset)
		ends[n+2] = len(b)
		n += 3
	}
	names := [6]string{}
	if a.Limit > 0 {
		add(a.Limit, a.Remaining, a.Reset)
		names[0], names[1], names[2] = "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"
	}
	if a.TokLimit > 0 {
		names[n], names[n+1], names[n+2] = "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"
		add(a.TokLimit, a.TokRemaining, a.TokReset)
	}
	all := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		start = ends[i]
		h[names[i]] = vals[i : i+1 : i+1]
	}
}

// appendReset renders a duration as OpenAI's reset headers do: "20ms"
// under a second, else Go's form rounded up to the second ("1s", "6m0s").
func appendReset(b []byte, d time.Duration) []byte {
	if d < time.Second {
		return append(strconv.AppendInt(b, int64((d+time.Millisecond-1)/time.Millisecond), 10), "ms"...)
	}
	d = (d + time.Second - 1) / time.Second * time.Second
	if d < time.Minute {
		return append(strconv.AppendInt(b, int64(d/time.Second), 10), 's')
	}
	return append(b, d.String()...)
}

// setExplain sets the x-triage-* headers of a routed decision, when the
// rules ask for them: the route, the reason, and the verdict of the tier
// that decided (class, score, and the route's mass and the floor it had to
// clear).
func setExplain(h http.Header, s *snapshot, dec *rules.Decision) {
	if !s.rules.Explain() {
		return
	}
	x := new(explainValues) // every value and its slice, in one allocation
	set := func(i int, k, v string) {
		x.v[i] = v
		h[k] = x.v[i : i+1 : i+1]
	}
	set(0, "X-Triage-Route", orDefault(dec.Route))
	set(1, "X-Triage-Reason", dec.Reason)
	if dec.Tier > 0 {
		set(2, "X-Triage-Class", dec.Class)
		set(3, "X-Triage-Tier", strconv.Itoa(dec.Tier))
		set(4, "X-Triage-Score", x.float(dec.Score))
	}
	if dec.Floor > 0 || dec.Mass > 0 {
		set(5, "X-Triage-Mass", x.float(dec.Mass))
		set(6, "X-Triage-Floor", x.float(dec.Floor))
	}
}

// explainValues holds the x-triage-* header values of one response, and
// the bytes of the numbers among them.
type explainValues struct {
	v [7]string
	b [48]byte
	n int
}

// float formats f with three decimals in x's bytes (which are never
// written again under a string made of them), or on the heap when they
// are full.
func (x *explainValues) float(f float32) string {
	out := appendFloat3(x.b[x.n:x.n:len(x.b)], f)
	if x.n+len(out) > len(x.b) || len(out) == 0 || &out[0] != &x.b[x.n] {
		return string(out)
	}
	x.n += len(out)
	return unsafe.String(&out[0], len(out))
}

// accessLine collects one request's facts for the metrics and the log.
type accessLine struct {
	id         string
	path       string
	model      []byte
	stream     bool
	start      time.Time
	bytesIn    int
	pool       *poolEntry
	dec        rules.Decision
	semantic   bool // the request named a rules alias
	decideTime time.Duration
	principal  string // who the credential named; "" without access control
	keyID      string // the API key's id; "" for a token
	status     int
	err        error
	res        proxy.Result
	done       bool
	trace      *reqTrace // nil: tracing off
	arm        rules.Arm // the split arm; rules.ArmNone: no split
	armBy      string    // what the arm was assigned by
	placedBy   string    // the override that chose the pool (place); "": the decision's own
	sampleText string    // the classifier's text, when sampled; "": not sampled
	sampleCut  bool      // sampleText was clipped
}

// account ends a request's record: it goes to each of its observers
// (metrics, usage log, trace, split log, sampler, access log), once.
func (g *Gateway) account(s *snapshot, al *accessLine) {
	if al.done {
		return
	}
	al.done = true
	g.served.Add(1)
	end := time.Now() // one clock read for the duration and the log line
	poolName := metrics.NoPool
	if al.pool != nil {
		poolName = al.pool.pool.Name()
	}
	g.observeMetrics(al, end)
	if s.usageOut != nil && al.principal != "" && al.pool != nil {
		g.recordUsage(s, al, poolName)
	}
	if al.trace != nil {
		al.trace.end(al, end, poolName)
	}
	if al.arm != rules.ArmNone {
		g.splitDone(s, al, poolName, end)
	}
	if al.sampleText != "" {
		g.recordSample(s, al)
	}
	if s.cfg.Log.AccessLog() || al.res.Aborted {
		g.logAccess(al, end, poolName)
	}
}

// observeMetrics counts a request in its pool's metrics (or the no-pool
// series, for one refused before a pool was chosen).
func (g *Gateway) observeMetrics(al *accessLine, end time.Time) {
	var pm *metrics.Pool
	if al.pool != nil {
		pm = al.pool.m
	} else {
		pm = g.metrics.Pool(metrics.NoPool)
	}
	pm.Code(al.status).Inc()
	pm.Duration.Observe(end.Sub(al.start).Seconds())
	res := &al.res
	if res.TTFB > 0 && al.pool != nil {
		pm.TTFB.Observe(res.TTFB.Seconds())
	}
	if res.Attempts > 1 {
		pm.Retries.Add(float64(res.Attempts - 1))
	}
	if res.Aborted {
		pm.Aborted.Inc()
	}
	if res.UsageFound && al.pool != nil {
		route := metrics.NoRoute
		if al.semantic {
			route = orDefault(al.dec.Route)
		}
		pm.Tokens(route, res.Usage.PromptTokens, res.Usage.CompletionTokens)
	}
}

// logAccess writes a request's access line (an aborted response's is
// written even with the access log off, as a warning).
func (g *Gateway) logAccess(al *accessLine, end time.Time, poolName string) {
	res := &al.res
	level, msg := "INFO", "request"
	if res.Aborted || al.status >= 500 {
		level = "WARN"
	}
	if res.Aborted {
		msg = "response aborted mid-stream"
	}
	backend := ""
	if res.Backend != nil {
		backend = res.Backend.Name
	}
	l := newLine(end, level, msg)
	l.str("request_id", al.id)
	l.str("path", al.path)
	clipped(&l, "model", al.model)
	l.bool("stream", al.stream)
	l.str("pool", poolName)
	if al.placedBy != "" {
		l.str("placed_by", al.placedBy)
	}
	l.str("backend", backend)
	if al.principal != "" {
		l.str("principal", al.principal)
	}
	if d := &al.dec; d.Reason != "" {
		l.str("reason", d.Reason)
		if al.semantic {
			logDecision(&l, d, al.decideTime)
		}
	}
	l.int("status", int64(al.status))
	l.int("attempts", int64(res.Attempts))
	l.ms("ttfb_ms", res.TTFB)
	l.ms("duration_ms", end.Sub(al.start))
	l.int("bytes_in", int64(al.bytesIn))
	l.int("bytes_out", res.Bytes)
	if res.UsageFound {
		l.int("prompt_tokens", res.Usage.PromptTokens)
		l.int("completion_tokens", res.Usage.CompletionTokens)
	}
	cause := al.err
	if res.Err != nil {
		cause = res.Err
	}
	if cause != nil {
		clipped(&l, "error", cause.Error())
	}
	l.end(g.access)
}

// logDecision adds a routing decision's fields to an access line.
func logDecision(l *logLine, d *rules.Decision, took time.Duration) {
	l.str("route", orDefault(d.Route))
	if d.Tier > 0 {
		l.str("class", d.Class)
		l.int("tier", int64(d.Tier))
		l.float("score", d.Score)
	}
	if d.Mass > 0 {
		l.float("mass", d.Mass)
	}
	if d.Block {
		l.bool("blocked", true)
	}
	l.us("decision_us", took)
}

// usageRecord is one line of the usage log.
type usageRecord struct {
	Time             time.Time `json:"time"`
	RequestID        string    `json:"request_id"`
	Principal        string    `json:"principal"`
	Key              string    `json:"key,omitempty"`
	Pool             string    `json:"pool"`
	Route            string    `json:"route,omitempty"`
	Class            string    `json:"class,omitempty"`
	Model            string    `json:"model"`
	Status           int       `json:"status"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	// Reported: the tokens are the response's usage (else the response
	// had none, and they are 0).
	Reported bool `json:"reported"`
}

// recordUsage writes a request's usage line; the writer buffers it for
// the background flusher.
func (g *Gateway) recordUsage(s *snapshot, al *accessLine, pool string) {
	rec := usageRecord{Time: al.start.UTC(), RequestID: al.id, Principal: al.principal, Key: al.keyID, Pool: pool,
		Model: string(al.model), Status: al.status, Reported: al.res.UsageFound,
		PromptTokens: al.res.Usage.PromptTokens, CompletionTokens: al.res.Usage.CompletionTokens}
	if al.semantic {
		rec.Route = orDefault(al.dec.Route)
		if al.dec.Tier > 0 {
			rec.Class = al.dec.Class
		}
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return
	}
	_, _ = s.usageOut.Write(append(b, '\n')) // one Write per line: the sink keeps lines whole
}

func orDefault(route string) string {
	if route == "" {
		return "default"
	}
	return route
}

// Request ids: a random per-process prefix and a counter, unless the client
// sent a usable X-Request-Id.
var (
	idPrefix = func() string {
		var b [6]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	idSeq atomic.Uint64
)

// requestID is the request's id as a header value: the client's
// X-Request-Id when it is a valid one, else a new one.
func requestID(h map[string][]string) []string {
	if v := h["X-Request-Id"]; len(v) == 1 && validID(v[0]) {
		return v[:1:1]
	}
	x := new(idValue)
	n := copy(x.b[:], idPrefix)
	x.b[n] = '-'
	out := strconv.AppendUint(x.b[:n+1], idSeq.Add(1), 36)
	x.v[0] = unsafe.String(&x.b[0], len(out)) // x.b is never written again
	return x.v[:]
}

// idValue is a made request id and the header value slice holding it, in
// one allocation.
type idValue struct {
	v [1]string
	b [32]byte // 12 hex digits, '-', at most 13 base-36 digits
}

func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// Body buffers up to 64 KiB are pooled; larger bodies are allocated.
const pooledBody = 64 << 10

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

func putBuf(bp *[]byte) {
	if bp != nil && cap(*bp) <= pooledBody {
		*bp = (*bp)[:0]
		bodyPool.Put(bp)
	}
}

// checkHeaders bounds what a replica would receive of the client's
// headers: their number and their size (names and values, with ": " and
// CRLF). A replica's server refuses a head past its own limit (uvicorn's is
// 16 KiB), so the gateway answers first, in OpenAI's shape.
//
// A request the gateway's own server parsed says how large its head was
// (HeadSize): each line counts at most one byte more here than it took
// on the wire ("k:v" is counted as "k: v"), so a head within the limits
// by that bound is not counted again.
func checkHeaders(r *http.Request, l *config.Limits) *openai.Error {
	if b, n := h1.HeadSize(r.Context()); n > 0 && n <= l.MaxHeaders && b+n <= int(l.MaxHeaderBytes) {
		return nil
	}
	n, size := 1, len(r.Host)+8 // Host moves out of Header
	for k, vs := range r.Header {
		n += len(vs)
		size += len(vs) * (len(k) + 4)
		for _, v := range vs {
			size += len(v)
		}
	}
	switch {
	case n > l.MaxHeaders:
		return openai.HeadersTooLarge(strconv.Itoa(n) + " header lines, more than the " + strconv.Itoa(l.MaxHeaders) + " allowed")
	case size > int(l.MaxHeaderBytes):
		return openai.HeadersTooLarge(strconv.Itoa(size) + " bytes of headers, more than the " + strconv.FormatInt(int64(l.MaxHeaderBytes), 10) + " allowed")
	}
	return nil
}

// headerLines gives r's header lines in the order they came, when the h1
// server parsed them (nil from net/http), for the proxy to forward in
// that order. Nothing here changes r.Header, which they mirror.
func headerLines(r *http.Request) (names, values []string) {
	return h1.HeaderLines(r.Context())
}

// readBody reads the whole body, capped at max bytes. The server's
// ReadTimeout bounds how long it may take. The buffer grows with what
// arrives, never past the declared length: a client that claims a large
// Content-Length and sends little costs what it sent, not what it claimed.
func readBody(r *http.Request, limit int64) ([]byte, *[]byte, *openai.Error) {
	if r.ContentLength > limit {
		return nil, nil, openai.TooLarge(limit)
	}
	bp := bodyPool.Get().(*[]byte)
	buf := *bp
	for {
		if len(buf) == cap(buf) {
			// Double, up to the declared length and one byte to see EOF.
			n := max(2*cap(buf), 8<<10)
			if cl := r.ContentLength; cl >= 0 && int64(n) > cl+1 {
				n = int(cl + 1)
			}
			if n <= cap(buf) {
				n = cap(buf) + 1
			}
			grown := make([]byte, len(buf), n)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, bp, openai.TooLarge(limit)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, bp, &openai.Error{Status: http.StatusRequestTimeout, Message: "timed out reading the request body", Type: openai.TypeInvalidRequest, Code: "request_timeout"}
			}
			return nil, bp, openai.BadRequest("could not read the request body: " + err.Error())
		}
	}
	*bp = buf
	return buf, bp, nil
}
