package router

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/triagegw/triage/anthropic"
	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/proxy"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/tenancy"
)

// A request to a model endpoint (chat completions, completions,
// embeddings, Messages, Responses) goes through named stages, in order:
//
//	admit    the headers and who is calling, before the body is read
//	read     the body, within its bound
//	extract  the body in the pools' terms: translated, parsed, its
//	         Responses chain checked against its owner
//	limit    the model allowed to the caller, its limits and budget counted
//	decide   the route: the rules (with the conversation's session and
//	         the tenant's pins) or the model table; a blocking route ends
//	         here
//	place    the pool: what the moment of sending overrides, each named
//	         (fallback, Responses chain), and the caller's right to the
//	         pool checked
//	forward  to a replica, and the answer relayed
//	settle   the tokens the answer used, and the request's record observed
//	         (metrics, usage, trace, split, sample, access line)
//
// A stage that refuses returns an error; fail writes it, the one place
// where an error becomes an answer in the client's dialect.

// exchange is one request on its way through the stages: what each stage
// found, for the stages after it. It lives on serve's stack.
type exchange struct {
	g   *Gateway
	s   *snapshot
	sh  shape
	r   *http.Request
	w   http.ResponseWriter
	raw http.ResponseWriter // the server's own writer: its optional methods without gin's wrapper
	al  accessLine          // the request's record, observed when it ends (settle)
	bp  *[]byte             // the body's pooled buffer

	path, query string // where the pools are sent it
	caller      tenancy.Caller
	adm         tenancy.Admission
	admitted    bool // adm holds limits to give back

	body, orig []byte         // the body in the pools' terms, and as the client sent it
	asks       anthropic.Asks // what a Messages request asks that not every pool serves
	req        openai.Request

	chain   responseLoc // the response a Responses chain continues
	chained bool

	alias    string
	semantic bool // the model named a rules alias
	dec      rules.Decision
	e        *poolEntry
	prefer   string // the replica a chain continues on
	part     uint64 // the tenant a salted request's prefix is the cache of (isolate)
}

// failure is a stage's refusal when what the client is told is not all
// the log should say, or the connection must not be reused.
type failure struct {
	answer error // *openai.Error, *anthropic.Error or *tenancy.Denial
	cause  error // for the log; nil: the answer
	close  bool  // close the connection after the answer
}

func (f *failure) Error() string { return f.answer.Error() }

func (g *Gateway) serve(c *gin.Context, sh shape) {
	x := exchange{g: g, s: g.snap.Load(), sh: sh, r: c.Request, w: c.Writer}
	x.raw = x.w
	if u, ok := x.w.(interface{ Unwrap() http.ResponseWriter }); ok {
		x.raw = u.Unwrap()
	}
	x.begin(c.FullPath())
	defer x.settle()
	err := x.admit()
	if err == nil {
		err = x.read()
	}
	if err == nil {
		err = x.extract()
	}
	if err == nil {
		err = x.limit()
	}
	if err == nil {
		err = x.decide()
	}
	if err == nil {
		err = x.place()
	}
	if err == nil {
		x.forward()
		if x.al.res.Aborted {
			panic(http.ErrAbortHandler) // after the deferred settling: the client must see the response break
		}
		return
	}
	x.fail(err)
}

// begin gives the request its id and starts its record.
func (x *exchange) begin(route string) {
	start := time.Now()
	ids := requestID(x.r.Header)
	x.w.Header()["X-Request-Id"] = ids
	x.al = accessLine{id: ids[0], path: x.r.URL.Path, start: start}
	if x.g.tracer != nil {
		x.al.trace = x.g.startTrace(x.r, route, start, ids[0])
	}
	x.path, x.query = x.r.URL.Path, x.r.URL.RawQuery
	if x.sh == shapeMessages {
		x.w.Header()["Request-Id"] = ids             // where Anthropic's clients look for it
		x.path, x.query = "/v1/chat/completions", "" // what the pools speak
	}
}

// fail answers err in the client's dialect and records it.
func (x *exchange) fail(err error) {
	cause := err
	if f, ok := err.(*failure); ok {
		err = f.answer
		if f.cause != nil {
			cause = f.cause
		}
		if f.close {
			x.w.Header()["Connection"] = []string{"close"}
		}
	}
	x.al.err = cause
	switch e := err.(type) {
	case *tenancy.Denial:
		x.g.deny(x.w, x.sh, &x.al, e)
	case *anthropic.Error:
		x.al.status = e.Status
		writeAnthropic(x.w, e)
	case *openai.Error:
		x.al.status = e.Status
		x.sh.writeError(x.w, e)
	default: // a stage returned what no client can be told: a bug
		oe := openai.Internal()
		x.al.status = oe.Status
		x.sh.writeError(x.w, oe)
	}
}

// admit checks the headers and who is calling, before the body is read:
// a stranger costs a map lookup and a hash, not a body.
func (x *exchange) admit() error {
	s := x.s
	if oe := checkHeaders(x.r, &s.cfg.Limits); oe != nil {
		return &failure{answer: oe, close: true}
	}
	if x.sh == shapeMessages {
		if ae := checkAnthropic(x.r.Header); ae != nil {
			return ae
		}
	}
	if s.access == nil {
		return nil
	}
	caller, d := s.access.Authenticate(x.r.Header, x.al.start)
	if d != nil {
		return d
	}
	x.caller = caller
	x.al.principal, x.al.keyID = caller.Principal().Name, caller.Principal().Key
	return nil
}

// read reads the body within its bound.
func (x *exchange) read() error {
	body, bp, oe := readBody(x.r, int64(x.s.cfg.Limits.MaxBodyBytes))
	x.bp = bp
	x.al.bytesIn = len(body)
	if oe != nil {
		// The rest of the body is not worth reading: close the connection
		// after the error instead of draining it.
		return &failure{answer: oe, close: true}
	}
	// golang/go#40747 cuts ~1% of streams when the response starts while
	// the request body is unread; the body is read by now, and full duplex
	// keeps it so if that ever changes. Not before: net/http (go1.26) then
	// races its background read against the next request after a 413.
	if fd, ok := x.raw.(interface{ EnableFullDuplex() error }); ok {
		_ = fd.EnableFullDuplex()
	}
	x.body, x.orig = body, body
	return nil
}

// extract reads the body in the pools' terms: a Messages request becomes
// the chat completion it is (routed, limited and forwarded as one), and a
// Responses chain is checked against its owner.
func (x *exchange) extract() error {
	if x.sh == shapeMessages {
		chat, asks, ae := anthropic.ToChatAsks(x.body, "", 0)
		if ae != nil {
			return ae
		}
		x.body, x.asks = chat, asks
	}
	req, err := openai.Extract(x.body)
	if err != nil {
		var oe *openai.Error
		if !errors.As(err, &oe) {
			oe = openai.BadRequest(err.Error())
		}
		return &failure{answer: oe, cause: err}
	}
	x.req = req
	x.al.model, x.al.stream = req.Model, req.Stream
	if x.sh == shapeResponses {
		return x.checkChain()
	}
	return nil
}

// checkChain finds the response a Responses chain continues. With access
// control, any chain not made by the caller (another principal's
// response, or one this gateway does not know) is refused here, before
// anything is counted or forwarded: the owner check must not only steer
// the replica, or a replica holding the response would continue it for
// anyone.
func (x *exchange) checkChain() error {
	prev, named, oe := chainOf(x.body, &x.req)
	if oe != nil {
		return oe
	}
	if !named {
		return nil
	}
	loc, ok := x.g.findResponse(x.r.Context(), prev)
	switch {
	case ok && loc.owner == x.al.principal:
		x.chain, x.chained = loc, x.s.byName[loc.pool] != nil
	case x.s.access != nil && !ok && x.g.shareDown():
		return indexUnavailable(x.w, prev)
	case x.s.access != nil:
		return previousNotFound(prev)
	}
	return nil
}

// limit checks the caller may name the model, and counts the request
// against its limits and budget before anything is decided: a client over
// its limit does not get tier 2 run for it.
func (x *exchange) limit() error {
	if x.s.rules != nil {
		x.alias, x.semantic = x.s.rules.Alias(x.req.Model)
	}
	if x.s.access == nil {
		return nil
	}
	if d := x.caller.AllowModel(string(x.req.Model), x.semantic); d != nil {
		return d
	}
	var t0 time.Time
	if x.al.trace != nil {
		t0 = time.Now()
	}
	adm, d := x.caller.Admit(x.al.start, x.caller.Estimate(len(x.body), x.req.MaxTokens))
	x.adm = adm
	if x.al.trace != nil {
		x.al.trace.admitted(t0, &x.adm, d)
	}
	h := x.w.Header()
	rateHeaders(h, &x.adm)
	if x.adm.Degraded {
		h["X-Triage-Degraded"] = []string{"true"} // shared limits counted on this replica alone
	}
	if d != nil {
		return d
	}
	x.admitted = true
	return nil
}

// decide finds the route: by the rules (and the conversation's session)
// for an alias, else by the model table. A blocking route is refused here.
func (x *exchange) decide() error {
	if !x.semantic {
		dec, err := x.s.table.decide(&x.req)
		if err != nil {
			return &failure{answer: openai.ModelNotFound(x.req.ModelName()), cause: err}
		}
		x.dec, x.al.dec = dec, dec
		return nil
	}
	x.decideRoute()
	if x.dec.Block {
		setExplain(x.w.Header(), x.s, &x.dec)
		return openai.Blocked(x.dec.Route, x.s.rules.BlockMessage(x.dec.Route))
	}
	return nil
}

// decideRoute runs the rules for an alias, with the conversation's
// session and the caller's pins (both part of the decision), and tells
// the decision's observers (metrics, shadow, sampler).
func (x *exchange) decideRoute() {
	g, s, al := x.g, x.s, &x.al
	t0 := time.Now()
	var sig rules.Signals
	release := s.signals(x.alias, x.body, &x.req, x.r.Header, &sig)
	sig.Principal, sig.Sessions = al.principal, s.sessions
	if s.access != nil {
		sig.Pins = x.caller.Pins()
	}
	al.arm = s.assignArm(x.w.Header(), &sig, al)
	var dec rules.Decision
	if al.trace != nil {
		dec = s.rules.DecideTimed(x.r.Context(), sig, &al.trace.timing)
	} else {
		dec = s.rules.Decide(x.r.Context(), sig)
	}
	al.decideTime = time.Since(t0)
	if al.trace != nil {
		al.trace.decided(t0, al.decideTime, &dec)
	}
	g.metrics.Decision(orDefault(dec.Route), dec.Reason, dec.Tier, al.decideTime.Seconds())
	g.shadow.Offer(s.rules, s.shadowOut, al.id, &sig, dec, al.decideTime)
	g.sampleText(s, al, sig.Text)
	release()
	x.dec, al.dec, al.semantic = dec, dec, true
}

// What chose the pool when it was not the route's own, as the access line
// names it (placed_by).
const (
	placedPin      = "tenant_pin"        // the tenant's own pool for the class (decided: rules.Decision.Pinned)
	placedFallback = "fallback"          // the route's pool had no healthy replica
	placedChain    = "previous_response" // a Responses chain goes where its response lives
)

// place finds the pool that serves the decision (which a tenant's pin is
// part of), applying what only the moment of sending knows, in order — the
// route's fallback, a Responses chain — and checks the caller may use it.
func (x *exchange) place() error {
	s, dec := x.s, &x.dec
	if dec.Pinned {
		x.al.placedBy = placedPin
	}
	e := s.byName[dec.Pool]
	if e == nil {
		return &failure{answer: openai.Internal(), cause: errors.New("router: decider chose unknown pool " + dec.Pool)}
	}
	if dec.Fallback != "" && !e.pool.Available() {
		if fb := s.byName[dec.Fallback]; fb != nil {
			e = fb
			x.al.placedBy = placedFallback
		}
	}
	if x.chained {
		// A chain continues where its previous response lives, whatever
		// the subject of its new turn.
		e, x.prefer = s.byName[x.chain.pool], x.chain.replica
		dec.Pool, dec.Fallback = x.chain.pool, ""
		if x.semantic {
			dec.Reason = placedChain
		}
		x.al.placedBy = placedChain
	}
	x.al.dec = *dec
	if x.sh == shapeResponses && e.kind == pool.KindAnthropic {
		oe := openai.BadRequest("pool " + strconv.Quote(e.pool.Name()) + " (kind anthropic) does not serve the Responses API; send chat completions or messages, or route Responses to a vllm or openai pool")
		oe.Param = "model"
		return oe
	}
	if x.semantic {
		setExplain(x.w.Header(), s, dec)
	}
	if s.access != nil {
		class := ""
		if x.semantic && dec.Tier > 0 {
			class = dec.Class
		}
		if d := x.caller.AllowRoute(e.pool.Name(), dec.Route, class); d != nil {
			return d
		}
	}
	x.e, x.al.pool = e, e
	return nil
}

// forward sends the request to a replica of the pool, in the pool's
// dialect, and relays the answer; the tokens it used are settled.
func (x *exchange) forward() {
	r, e, req := x.r, x.e, &x.req
	fr := proxy.Request{
		Method: r.Method, Path: x.path, RawQuery: x.query, Header: r.Header,
		Body: x.body, Stream: req.Stream, RequestID: x.al.id, Start: x.al.start,
		Usage: true, // chat, completions and embeddings all end with their usage
	}
	fr.HeaderNames, fr.HeaderValues = headerLines(r)
	if req.ModelEscaped || string(req.Model) != e.model {
		fr.ModelSpan, fr.ModelTok = req.ModelSpan, e.tok
	}
	if x.al.trace != nil {
		fr.Trace = x.al.trace
	}
	if err := x.dialect(&fr); err != nil {
		x.fail(err)
		return
	}
	// X-Triage-Replica-Choice says whether some replica was sent this
	// prefix before: across tenants that tells one about another's
	// prompts, so it is never sent with access control on.
	key := affinity(&fr, e, x.body, req, x.semantic && x.s.rules.Explain() && x.s.access == nil, x.part)
	res := x.g.tr.Forward(r.Context(), x.w, e.pool, &e.policy, &fr)
	unkey(key)
	switch {
	case res.UsageFound:
		x.adm.Settle(res.Usage.PromptTokens, res.Usage.CompletionTokens, e.pool.Name())
	case res.Status/100 == 2:
		x.adm.Keep() // answered without usage: the estimate stands
	} // else nothing was generated: settle refunds the estimate
	x.al.res = res
	x.al.status = res.Status
}

// dialect sets what the request needs to be sent in the pool's dialect and
// answered in the client's.
func (x *exchange) dialect(fr *proxy.Request) error {
	e, req := x.e, &x.req
	switch {
	case e.kind == pool.KindAnthropic:
		if oe := toAnthropicPool(fr, e, x.sh, x.orig, req); oe != nil {
			return oe
		}
	case x.sh == shapeMessages:
		// The chat request asks for usage itself (message_delta reports
		// it), and the answer goes back as a Messages answer.
		if oe := toChatPool(fr, e, x.asks, x.orig); oe != nil {
			return oe
		}
	case x.sh == shapeResponses:
		// Responses streams report usage in their last event unasked.
		fr.Prefer = x.prefer
		fr.Peek = (&idPeek{g: x.g, pool: e.pool.Name(), owner: x.al.principal}).peek
	case req.Stream && e.askUsage:
		// A stream ends with its usage only when asked: ask on the
		// client's behalf, and drop the answer before it sees it.
		if ed, ok := openai.UsageEdit(x.body, req); ok {
			fr.Edit, fr.StripUsage = ed, true
		}
	}
	return x.isolate(fr)
}

// settle ends the request: limits it held are given back (a request
// refused or failing before a replica answered returns its estimate), and
// its record goes to the observers before the body buffer, which the
// record's model points into, is reused.
func (x *exchange) settle() {
	if x.admitted {
		x.adm.Settle(0, 0, "") // a no-op once forward settled
		x.adm.Release()
	}
	x.g.account(x.s, &x.al)
	putBuf(x.bp)
}
