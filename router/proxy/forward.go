package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/pool"
)

// Request is one client request to forward. Header and Body are read, never
// modified.
type Request struct {
	Method   string      // the client's method
	Path     string      // the client's path, such as /v1/chat/completions
	RawQuery string      // the client's query, without '?'
	Header   http.Header // the client's headers; hop-by-hop ones and Authorization are not forwarded
	// HeaderNames and HeaderValues, when set, are Header's lines in the
	// order the client sent them, with a blank name for a line Header
	// does not hold (the h1 server's HeaderLines): the head goes upstream
	// in the client's order, without iterating Header. They must hold
	// what Header holds.
	HeaderNames, HeaderValues []string
	Body                      []byte
	// ModelTok, when not nil, replaces the bytes at ModelSpan in Body: the
	// model name the pool serves, as a JSON string token.
	ModelSpan openai.Span
	ModelTok  []byte
	// Edit, when its Tok is not nil, is a second change to Body (the
	// stream_options that ask for usage, openai.UsageEdit); it never
	// overlaps ModelSpan.
	Edit openai.Edit
	// Salt, when its edits' Tok are not nil, sets the body's cache_salt
	// (openai.Salt); it never overlaps ModelSpan or Edit, and goes after
	// Edit where both insert at the same place.
	Salt openai.SaltEdits
	// StripUsage drops a streamed 2xx response's usage chunk
	// (openai.UsageEvent) before the client sees it, for a client that
	// did not ask for one when Edit did on its behalf. The chunk's usage
	// is still reported (Result.Usage).
	StripUsage bool
	// Stream is the request's "stream": true; a streamed request whose
	// head is late may be tried elsewhere (pool.Retry.FirstByteTimeout).
	Stream bool
	// RequestID is sent upstream as X-Request-Id.
	RequestID string
	// Start is when the gateway received the request; the pool's total
	// timeout and retry budget count from it, and TTFB is measured from it.
	Start time.Time
	// Prefer names the replica (pool.Backend.Name) to try first while it
	// is available: the one holding a conversation's state.
	Prefer string
	// Key, when not nil, is the request's prefix key (pool.Pool.Key), for
	// a pool that balances by prefix.
	Key *pool.Key
	// ExplainChoice sets X-Triage-Replica-Choice on the response: why the
	// replica that answered was chosen (pool.Choice).
	ExplainChoice bool
	// Peek, when not nil, sees the first bytes of a 2xx body, read by
	// read, before the client does, with the replica answering, until it
	// returns true (a response id, say, recorded before the client can
	// use it).
	Peek func(replica string, p []byte) (done bool)
	// Translate, when not nil, rewrites the response into the client's
	// API shape.
	Translate Translator
	// WriteError, when not nil, writes the errors the gateway answers
	// itself (no replica answered) in the client's API shape; OpenAI's
	// otherwise.
	WriteError func(w http.ResponseWriter, e *openai.Error)
	// Usage asks for the response's token usage: the last
	// openai.TailSize bytes of a 2xx body are kept as they pass and
	// scanned once it ends (Result.Usage). No chunk is parsed.
	Usage bool
	// Trace, when not nil, sees each upstream attempt and gives the trace
	// context sent with it, in place of the client's.
	Trace Tracer
}

// Tracer sees a request's upstream attempts, for tracing. Its calls come
// from the request's goroutine, in order: Attempt, then AttemptDone, for
// each attempt.
type Tracer interface {
	// Attempt begins attempt n (from 1) on replica b, and returns the
	// header lines that carry its trace context upstream, each
	// "Name: value\r\n" (Traceparent, and Tracestate when there is one).
	// The client's own Traceparent and Tracestate are not forwarded.
	Attempt(n int, b *pool.Backend) []byte
	// AttemptDone ends the attempt begun last: status is the replica's
	// (0: none came); retry, when not "", says why the request goes to
	// another replica next (RetryConnect, RetryNotSent, RetryFirstByte,
	// RetryStatus); err is why the attempt failed, or why its relay did
	// (nil: the answer went through whole).
	AttemptDone(status int, retry string, err error)
}

// Why an attempt is retried (Tracer.AttemptDone).
const (
	RetryConnect   = "connect"            // the replica could not be reached
	RetryNotSent   = "not_sent"           // writing the request failed: the replica cannot have acted on it
	RetryFirstByte = "first_byte_timeout" // a stream's head came later than retry.first_byte_timeout
	RetryStatus    = "status"             // the replica answered 502, 503 or 504
)

// attemptDone reports the end of an attempt to req.Trace, if any.
func (req *Request) attemptDone(status int, retry string, err error) {
	if req.Trace != nil {
		req.Trace.AttemptDone(status, retry, err)
	}
}

// retryReason names why a failed attempt is tried again.
func retryReason(err error) string {
	var ce *connectError
	switch {
	case errors.As(err, &ce):
		return RetryConnect
	case notSent(err):
		return RetryNotSent
	}
	return RetryFirstByte
}

// Result is what happened, for metrics, logs and accounting.
type Result struct {
	Backend  *pool.Backend // the replica whose answer was relayed, or the last one tried
	Status   int           // the status sent to the client (499: the client left first)
	TTFB     time.Duration // from Start to the response head reaching the client; 0 if none did
	Bytes    int64         // response body bytes sent to the client
	Attempts int           // upstream attempts made
	Choice   pool.Choice   // why Backend was chosen
	Err      error         // the cause of a failure, for the log; never shown to the client
	// Aborted means the response broke after its head was sent: the caller
	// must abort the client connection (panic(http.ErrAbortHandler)) so the
	// client sees a truncated response, not a complete one.
	Aborted bool
	// ClientGone means the client left (or stopped reading) before the end.
	ClientGone bool
	// Usage is the token usage the response's tail reports, when
	// Request.Usage asked and UsageFound.
	Usage      openai.Usage
	UsageFound bool

	start time.Time
}

// errClientGone marks a relay stopped because writing to the client failed.
var errClientGone = errors.New("client connection closed")

// Forward sends req to a replica of p and relays the answer to w. It writes
// an OpenAI-shaped error itself when no replica answers; it never writes a
// half response without reporting Aborted.
func (t *Transport) Forward(ctx context.Context, w http.ResponseWriter, p *pool.Pool, pol *Policy, req *Request) (res Result) {
	res.start = req.Start
	deadline := req.Start.Add(pol.Total)
	budgetEnd := req.Start.Add(pol.Budget)
	var triedArr [4]*pool.Backend
	tried := triedArr[:0]

	var b *pool.Backend
	var err error
	if req.Prefer != "" {
		b, res.Choice, err = p.PickNamedKey(req.Prefer, req.Key)
	} else {
		b, res.Choice, err = p.PickKey(req.Key, nil)
	}
	if err != nil {
		res.Err = err
		return t.fail(w, req, res, openai.NoBackend(p.Name()))
	}
	for attempt := 1; ; attempt++ {
		res.Attempts, res.Backend = attempt, b
		tried = append(tried, b)
		// The clock is read only where a retry is possible.
		canRetry := func() bool { return attempt < pol.Attempts && time.Now().Before(budgetEnd) }
		var hurry time.Duration // the head's own limit, when a late one is tried elsewhere
		if req.Stream && canRetry() {
			hurry = pol.Hurry
		}
		var tc []byte // the attempt's trace context
		if req.Trace != nil {
			tc = req.Trace.Attempt(attempt, b)
		}
		up, err := t.attempt(ctx, b, req, pol, deadline, hurry, tc)
		if err != nil {
			b.Release()
			res.Err = err
			if ctx.Err() != nil {
				p.Report(b, pool.Neutral)
				res.ClientGone, res.Status = true, 499
				req.attemptDone(0, "", err)
				return res
			}
			p.Report(b, pool.Failure)
			var late *lateHeadError
			if (notSent(err) || errors.As(err, &late)) && canRetry() {
				if next, c, perr := p.PickKey(req.Key, tried); perr == nil {
					res.Choice = c
					req.attemptDone(0, retryReason(err), err)
					b = next
					continue
				}
			}
			req.attemptDone(0, "", err)
			return t.fail(w, req, res, errorFor(err))
		}
		// up lives in its connection, which the relay may hand to another
		// request: what is needed of it is read first.
		status := up.status
		if retryStatus(status) && canRetry() {
			if next, c, perr := p.PickKey(req.Key, tried); perr == nil {
				res.Choice = c
				up.close()
				b.Release()
				p.Report(b, pool.Failure)
				res.Err = &statusError{status}
				req.attemptDone(status, RetryStatus, res.Err)
				b = next
				continue
			}
		}
		res.Err = nil
		return t.answer(ctx, w, p, b, up, pol, req, deadline, res)
	}
}

// answer relays the replica's answer, the attempt that is not retried,
// and reports how the replica did.
func (t *Transport) answer(ctx context.Context, w http.ResponseWriter, p *pool.Pool, b *pool.Backend, up *upstream, pol *Policy, req *Request, deadline time.Time, res Result) Result {
	status := up.status // before the relay, which may hand up's connection on
	if req.ExplainChoice {
		w.Header()["X-Triage-Replica-Choice"] = choiceValues[res.Choice : res.Choice+1 : res.Choice+1]
	}
	res = t.relay(ctx, w, up, pol, req, deadline, res)
	b.Release()
	req.attemptDone(status, "", res.Err)
	switch {
	case res.ClientGone:
		p.Report(b, pool.Neutral)
	case res.Aborted || res.Err != nil || status >= 500 || res.Status >= 500:
		p.Report(b, pool.Failure)
	default:
		p.Report(b, pool.Success)
	}
	return res
}

// choiceValues are the X-Triage-Replica-Choice values, indexed by
// pool.Choice: a header set without allocating.
var choiceValues = func() []string {
	v := make([]string, len(pool.Choices))
	for _, c := range pool.Choices {
		v[c] = c.String()
	}
	return v
}()

func (t *Transport) fail(w http.ResponseWriter, req *Request, res Result, e *openai.Error) Result {
	if req.WriteError != nil {
		req.WriteError(w, e)
	} else {
		openai.WriteError(w, e)
	}
	res.Status = e.Status
	res.TTFB = time.Since(res.start)
	return res
}

func retryStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "upstream answered " + http.StatusText(e.code) }

// errorFor maps an attempt's failure to what the client is told.
func errorFor(err error) *openai.Error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return openai.GatewayTimeout()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return openai.GatewayTimeout()
	}
	return openai.BadGateway()
}

// notSent reports a failure before the request reached the replica in
// full: a connect error or a failed write. Only those are retried; any
// later failure may come after the replica began generating.
func notSent(err error) bool {
	var ce *connectError
	var ne *notSentError
	return errors.As(err, &ce) || errors.As(err, &ne)
}

// attempt sends req on a connection to b and reads the response status. A
// kept-alive connection the replica closed while idle (which the write
// finds) is replaced by a fresh one, once, and that does not count as an
// attempt.
func (t *Transport) attempt(ctx context.Context, b *pool.Backend, req *Request, pol *Policy, deadline time.Time, hurry time.Duration, tc []byte) (*upstream, error) {
	fresh := false
	for {
		var c *conn
		var err error
		if !fresh {
			c, err = t.get(ctx, b, pol.Connect)
		} else {
			c, err = t.dial(ctx, b, t.host(b), pol.Connect)
		}
		if err != nil {
			return nil, err
		}
		up, err := t.roundTrip(ctx, c, b, req, pol, deadline, hurry, tc)
		if err == nil {
			return up, nil
		}
		var ne *notSentError
		if c.reused && !fresh && ctx.Err() == nil && errors.As(err, &ne) {
			fresh = true
			continue
		}
		return nil, err
	}
}
