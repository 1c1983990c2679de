package router

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/proxy"
	"github.com/triagegw/triage/tenancy"
)

// responseIndex remembers where each Responses answer was made: the pool
// and the replica, since vLLM keeps a stored response (and so a
// previous_response_id chain) in that replica's memory, and who asked for
// it, so no other tenant can read or delete it. It outlives reloads. It is
// bounded: the oldest ids are forgotten first, and a forgotten id is
// routed as any other request (its replica answers 404 if it forgot too).
type responseIndex struct {
	mu sync.Mutex
	m  map[string]indexed
	// waiting holds, per id not known yet, the channels of the requests
	// waiting for it to arrive from another replica (find); add closes
	// them.
	waiting map[string][]chan struct{}
	// ring holds the ids in the order they were added. It grows with use
	// up to max, then wraps: a gateway nobody sends Responses through
	// keeps no 2 MiB of slots for the collector to scan.
	ring []string
	max  int
	next int
}

// indexed is an id's location and the ring slot that holds it: a slot
// whose id was removed and then added again (a replica may repeat an id)
// no longer owns the entry, and its eviction must not drop the newer one.
type indexed struct {
	loc  responseLoc
	slot int
}

type responseLoc struct {
	pool, replica string
	owner         string // the principal that made it; "" without access control
}

// responseIndexSize bounds the index: about 100 bytes an id.
const responseIndexSize = 1 << 17

func newResponseIndex(n int) *responseIndex {
	return &responseIndex{m: make(map[string]indexed), waiting: make(map[string][]chan struct{}), max: n}
}

func (x *responseIndex) add(id string, loc responseLoc) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range x.waiting[id] {
		close(c) // each waiter reads the entry once this add has let go of mu
	}
	delete(x.waiting, id)
	if e, ok := x.m[id]; ok {
		e.loc = loc
		x.m[id] = e
		return
	}
	if len(x.ring) < x.max {
		x.m[id] = indexed{loc: loc, slot: len(x.ring)}
		x.ring = append(x.ring, id)
		return
	}
	slot := x.next
	if old := x.ring[slot]; old != "" {
		if e, ok := x.m[old]; ok && e.slot == slot {
			delete(x.m, old)
		}
	}
	x.m[id] = indexed{loc: loc, slot: slot}
	x.ring[slot] = id
	x.next = (slot + 1) % len(x.ring)
}

func (x *responseIndex) get(id string) (responseLoc, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.m[id]
	return e.loc, ok
}

// find is get for an id that may still be on its way from another
// replica: when the index does not know it, it waits for it at most d,
// or until ctx ends.
func (x *responseIndex) find(ctx context.Context, id string, d time.Duration) (responseLoc, bool) {
	x.mu.Lock()
	if e, ok := x.m[id]; ok || d <= 0 {
		x.mu.Unlock()
		return e.loc, ok
	}
	ch := make(chan struct{})
	x.waiting[id] = append(x.waiting[id], ch)
	x.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if ws := x.waiting[id]; ws != nil { // not woken: withdraw
		if i := slices.Index(ws, ch); i >= 0 {
			ws = slices.Delete(ws, i, i+1)
		}
		if len(ws) == 0 {
			delete(x.waiting, id)
		} else {
			x.waiting[id] = ws
		}
	}
	e, ok := x.m[id]
	return e.loc, ok
}

// waiters is how many requests wait in find.
func (x *responseIndex) waiters() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, ws := range x.waiting {
		n += len(ws)
	}
	return n
}

func (x *responseIndex) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.m, id) // its ring slot is reused in turn
}

// maxIDPeek bounds how much of an answer is searched for its id: it is the
// first field of a response object and of a stream's first event.
const maxIDPeek = 1024

// idPeek collects the start of a Responses answer until it holds the
// response's id (Request.Peek), and records where the answer lives at
// once: before the client has the id, so its next request (a chain, a
// read) finds it however soon it comes.
type idPeek struct {
	g           *Gateway
	pool, owner string
	buf         []byte
}

func (p *idPeek) peek(replica string, b []byte) bool {
	p.buf = append(p.buf, b[:min(len(b), maxIDPeek-len(p.buf))]...)
	if id := responseID(p.buf); id != "" {
		loc := responseLoc{pool: p.pool, replica: replica, owner: p.owner}
		p.g.responses.add(id, loc)
		if p.g.share != nil {
			p.g.share.offerResponse(id, loc)
		}
		return true
	}
	return len(p.buf) >= maxIDPeek
}

// responseID finds the first "id":"resp…" in the start of a response
// object or stream; "" when it has not arrived.
func responseID(b []byte) string {
	const key = `"id":`
	for {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			return ""
		}
		v := bytes.TrimLeft(b[i+len(key):], " ")
		if len(v) > 0 && v[0] == '"' {
			if end := bytes.IndexByte(v[1:], '"'); end > 0 {
				id := v[1 : 1+end]
				if bytes.HasPrefix(id, []byte("resp")) && validID(string(id)) {
					return string(id)
				}
			}
		}
		b = b[i+len(key):]
	}
}

// chainOf reads a Responses request's previous_response_id: named is
// false when the request continues nothing (the field absent or null);
// id is the response it names, "" when that is not a plain response id
// (a JSON string, escapes decoded, of the characters ids are made of),
// which no index entry can match. A value that is not a string at all is
// a 400, as the upstream would answer.
func chainOf(body []byte, req *openai.Request) (id string, named bool, oe *openai.Error) {
	s := req.PreviousResponseID
	if s.Len() == 0 {
		return "", false, nil
	}
	raw := body[s.Start:s.End]
	switch raw[0] {
	case 'n': // null
		return "", false, nil
	case '"':
	default:
		oe := openai.BadRequest("previous_response_id must be a string")
		oe.Param = "previous_response_id"
		return "", true, oe
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		id = string(raw[1 : len(raw)-1])
	} else if json.Unmarshal(raw, &id) != nil {
		id = ""
	}
	if !validID(id) || !strings.HasPrefix(id, "resp") {
		return "", true, nil
	}
	return id, true, nil
}

// shareWait bounds how long a request naming a Responses id this replica
// does not know waits for it to arrive from the replica that made it
// (sessionShare): a client's next turn may come through another replica
// before the share's Redis round trip, more so while Redis is slow.
const shareWait = time.Second

// findResponse is where the response id lives, waiting for it up to
// shareWait when the replicas share their answers.
func (g *Gateway) findResponse(ctx context.Context, id string) (responseLoc, bool) {
	if g.share == nil {
		return g.responses.get(id)
	}
	return g.responses.find(ctx, id, shareWait)
}

// indexUnavailable is the answer, with Retry-After, for a response id this
// replica does not know while Redis, through which the replicas share
// their answers, does not answer: another replica may have made it, and
// the client's retry may find it, where a 404 would say it is gone.
func indexUnavailable(w http.ResponseWriter, id string) *openai.Error {
	w.Header()["Retry-After"] = []string{"1"}
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeServer, Code: "responses_index_unavailable",
		Message: "response '" + id + "' is not known to this gateway, and the store that shares responses between gateways is not answering; retry later"}
}

// shareDown reports whether the replicas' shared state (Redis) is not
// answering.
func (g *Gateway) shareDown() bool { return g.redis != nil && !g.redis.Healthy() }

// previousNotFound is the 404 for a chain the caller may not continue: a
// response another principal made answers exactly as one that does not
// exist, and neither is forwarded.
func previousNotFound(id string) *openai.Error {
	what := "the previous_response_id"
	if id != "" {
		what = "id '" + id + "'"
	}
	return &openai.Error{Status: http.StatusNotFound, Message: "Previous response with " + what + " not found.",
		Type: openai.TypeInvalidRequest, Param: "previous_response_id", Code: "previous_response_not_found"}
}

// responsePath checks the part of a stored response's path below
// /v1/responses/ (rest, decoded, without its leading slash): one clean id
// segment, then nothing or a sub-resource the method has (input_items to
// read, cancel to POST). Anything else, dot segments, escaped slashes and
// extra segments included, is refused: the owner check reads the first
// segment, so the path a replica is sent must name no other response.
func responsePath(method, rest string, escaped bool) (id, sub string, oe *openai.Error) {
	id, sub, _ = strings.Cut(rest, "/")
	bad := escaped || !validID(id) || !strings.HasPrefix(id, "resp") || strings.Contains(id, "..")
	switch {
	case bad:
	case sub == "" && (method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete):
		return id, "", nil
	case sub == "input_items" && (method == http.MethodGet || method == http.MethodHead):
		return id, sub, nil
	case sub == "cancel" && method == http.MethodPost:
		return id, sub, nil
	default:
		return "", "", openai.NotFound(method, "/v1/responses/"+rest)
	}
	oe = openai.BadRequest("the response id in the path must be a single segment of letters, digits and - _ . : starting with resp, with no dot segments or escapes")
	oe.Param = "response_id"
	return "", "", oe
}

// storedResponse serves GET and DELETE /v1/responses/{id} (and what lies
// below it, such as input_items): the request goes to the pool and replica
// that made the response, for the principal that made it.
func (g *Gateway) storedResponse(c *gin.Context) {
	start := time.Now()
	s := g.snap.Load()
	r, w := c.Request, c.Writer
	ids := requestID(r.Header)
	w.Header()["X-Request-Id"] = ids
	al := accessLine{id: ids[0], path: r.URL.Path, start: start}
	defer g.account(s, &al)
	rest := strings.TrimPrefix(c.Param("rest"), "/")
	id, sub, oe := responsePath(r.Method, rest, r.URL.RawPath != "" && r.URL.RawPath != r.URL.Path)
	if oe != nil {
		al.status, al.err = oe.Status, oe
		openai.WriteError(w, oe)
		return
	}
	path := "/v1/responses/" + id
	if sub != "" {
		path += "/" + sub
	}
	notFound := func() {
		oe := &openai.Error{Status: http.StatusNotFound, Message: "No response with id '" + id + "' is known to this gateway.", Type: openai.TypeInvalidRequest, Param: "response_id", Code: "response_not_found"}
		al.status, al.err = oe.Status, oe
		openai.WriteError(w, oe)
	}
	var caller tenancy.Caller
	owner := ""
	if s.access != nil {
		var d *tenancy.Denial
		if caller, d = s.access.Authenticate(r.Header, start); d != nil {
			g.deny(w, shapeOpenAI, &al, d)
			return
		}
		al.principal, al.keyID = caller.Principal().Name, caller.Principal().Key
		owner = caller.Principal().Name
	}
	loc, ok := g.findResponse(r.Context(), id)
	if !ok && g.shareDown() {
		oe := indexUnavailable(w, id)
		al.status, al.err = oe.Status, oe
		openai.WriteError(w, oe)
		return
	}
	if !ok || loc.owner != owner {
		notFound() // another tenant's response does not exist for this one
		return
	}
	e := s.byName[loc.pool]
	if e == nil {
		notFound() // its pool was removed by a reload
		return
	}
	al.pool = e
	fr := proxy.Request{Method: r.Method, Path: path, RawQuery: r.URL.RawQuery, Header: r.Header,
		RequestID: ids[0], Start: start, Prefer: loc.replica}
	fr.HeaderNames, fr.HeaderValues = headerLines(r)
	res := g.tr.Forward(r.Context(), w, e.pool, &e.policy, &fr)
	al.res, al.status = res, res.Status
	if r.Method == http.MethodDelete && res.Status/100 == 2 && sub == "" {
		g.responses.remove(id)
	}
	if res.Aborted {
		panic(http.ErrAbortHandler)
	}
}
