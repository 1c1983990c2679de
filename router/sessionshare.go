package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/tenancy"
)

// sessionTopic is the Redis stream the replicas share sessions and
// Responses answers on.
const sessionTopic = "sessions"

// How the share writes: Redis keeps about the latest shareKeep entries
// (a few hundred bytes each), which a replica reads when it starts; an
// entry whose write failed is written again, after shareRetry doubling up
// to shareRetryMax, for at most shareRetryFor (then dropped, counted).
const (
	shareKeep     = 1 << 15
	shareRetry    = 50 * time.Millisecond
	shareRetryMax = 100 * time.Millisecond
	shareRetryFor = 30 * time.Second
)

// sessionShare hands the sessions a replica records, and the Responses
// answers it makes, to the other replicas through a Redis stream, so a
// conversation keeps its route (and a Responses chain its replica)
// whichever replica takes its next turn. It never blocks a request: a
// recorded session is queued, written by a goroutine of its own (again
// while Redis does not answer, for up to shareRetryFor), and dropped
// (counted) when the queue is full; a replica reads the others' from the
// stream on another goroutine: when it starts, the latest shareKeep
// entries (so a replica restarted or added knows the conversations and
// chains already under way), then each as it comes, reading on after an
// outage from where it stopped. A Redis restarted empty holds only what
// was written after it came back: the replicas running keep what they
// had learned, and a replica started after that knows the earlier
// sessions and chains only if Redis persists its data (appendonly yes).
// Delivery takes a round trip to Redis: a
// next turn that arrives at another replica within that time, or while
// Redis does not answer, is decided on its own, as without sharing; what
// was written meanwhile arrives once Redis answers. A Responses chain
// waits for its previous answer's entry up to shareWait; one still
// unknown is refused with access control, as not found, or while Redis
// does not answer with 503 and Retry-After (indexUnavailable).
type sessionShare struct {
	store    tenancy.Store
	self     string // this replica's id, to skip its own messages
	out      chan sessionMsg
	dropped  atomic.Uint64
	appended atomic.Uint64 // entries written
	learned  atomic.Uint64
	// caughtUp is closed once the stream's backlog has been read: what
	// the other replicas had shared is known here.
	caughtUp chan struct{}
	once     sync.Once
}

// sessionMsg is a recorded session, or (Resp set) where a Responses
// answer was made, so any replica can send its chain and reads there.
type sessionMsg struct {
	From string `json:"from"`
	// P is the principal whose session it is ("" without access control).
	P    string          `json:"p,omitempty"`
	ID   string          `json:"id"`
	D    rules.Decision  `json:"d,omitzero"`
	Resp *sharedResponse `json:"resp,omitempty"`
}

type sharedResponse struct {
	Pool    string `json:"pool"`
	Replica string `json:"replica"`
	Owner   string `json:"owner,omitempty"`
}

func newSessionShare(store tenancy.Store) *sessionShare {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &sessionShare{store: store, self: hex.EncodeToString(b[:]), out: make(chan sessionMsg, 1024),
		caughtUp: make(chan struct{})}
}

// offer queues a recorded session for the other replicas.
func (x *sessionShare) offer(principal, id string, d rules.Decision) {
	x.send(sessionMsg{From: x.self, P: principal, ID: id, D: d})
}

// offerResponse queues where a Responses answer was made.
func (x *sessionShare) offerResponse(id string, loc responseLoc) {
	x.send(sessionMsg{From: x.self, ID: id, Resp: &sharedResponse{Pool: loc.pool, Replica: loc.replica, Owner: loc.owner}})
}

func (x *sessionShare) send(m sessionMsg) {
	select {
	case x.out <- m:
	default:
		x.dropped.Add(1)
	}
}

// run writes what is offered and applies what the others write, until
// ctx is done.
func (x *sessionShare) run(ctx context.Context, g *Gateway) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		x.store.Follow(ctx, sessionTopic, shareKeep, func() { x.once.Do(func() { close(x.caughtUp) }) }, x.learn(g))
	})
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-x.out:
			b, err := json.Marshal(m)
			if err != nil {
				x.dropped.Add(1)
				continue
			}
			if !x.write(ctx, b) {
				if ctx.Err() != nil {
					return
				}
				x.dropped.Add(1)
			}
		}
	}
}

// write appends b to the stream, again after each failure, for at most
// shareRetryFor; it reports whether Redis took it. A write that timed out
// may still run (a stalled Redis runs what it was sent): the entry is
// then there twice, and learning it twice changes nothing.
func (x *sessionShare) write(ctx context.Context, b []byte) bool {
	deadline := time.Now().Add(shareRetryFor)
	for wait := shareRetry; ; wait = min(2*wait, shareRetryMax) {
		if x.store.Append(ctx, sessionTopic, b, shareKeep) == nil {
			x.appended.Add(1)
			return true
		}
		if time.Now().Add(wait).After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// learn applies another replica's recorded session.
func (x *sessionShare) learn(g *Gateway) func([]byte) {
	return func(b []byte) {
		var m sessionMsg
		if json.Unmarshal(b, &m) != nil || m.From == x.self {
			return
		}
		s := g.snap.Load()
		if r := m.Resp; r != nil {
			if validID(m.ID) && s.byName[r.Pool] != nil {
				g.responses.add(m.ID, responseLoc{pool: r.Pool, replica: r.Replica, owner: r.Owner})
				x.learned.Add(1)
			}
			return
		}
		// Into the gateway's store, whatever the snapshot in effect: a
		// replica starting reads the backlog while it may still be
		// applying its first rules, and a session is resolved by its
		// route's name when a turn uses it (a route or pool this
		// replica's config lacks keeps nothing).
		g.sessions.Learn(m.P, m.ID, m.D)
		x.learned.Add(1)
	}
}
