package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/triagegw/triage/router/access"
	"github.com/triagegw/triage/rules"
)

// sessionTopic is the Redis channel the replicas share sessions on.
const sessionTopic = "sessions"

// sessionShare hands the sessions a replica records, and the Responses
// answers it makes, to the other replicas through Redis, so a conversation
// keeps its route (and a Responses chain its replica) whichever replica
// takes its next turn. It never blocks a request: a recorded session is queued,
// published by a goroutine of its own, and dropped (counted) when the
// queue is full; a replica learns the others' sessions from a
// subscription, on another goroutine. Delivery is at most once and takes
// a round trip to Redis: a next turn that arrives at another replica
// within that time (or while Redis is down) is decided on its own, as
// without sharing.
type sessionShare struct {
	store   *access.RedisStore
	self    string // this replica's id, to skip its own messages
	out     chan sessionMsg
	dropped atomic.Uint64
	learned atomic.Uint64
	// subscribed is closed once Redis has confirmed the subscription:
	// what another replica publishes from then on is learned here.
	subscribed chan struct{}
	once       sync.Once
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

func newSessionShare(store *access.RedisStore) *sessionShare {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &sessionShare{store: store, self: hex.EncodeToString(b[:]), out: make(chan sessionMsg, 1024),
		subscribed: make(chan struct{})}
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

// run publishes what is offered and applies what the others publish,
// until ctx is done.
func (x *sessionShare) run(ctx context.Context, g *Gateway) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		x.store.Subscribe(ctx, sessionTopic, func() { x.once.Do(func() { close(x.subscribed) }) }, x.learn(g))
	})
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-x.out:
			b, err := json.Marshal(m)
			if err == nil {
				err = x.store.Publish(ctx, sessionTopic, b)
			}
			if err != nil {
				x.dropped.Add(1)
			}
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
		if s.sessions == nil || (m.D.Pool != "" && s.byName[m.D.Pool] == nil) {
			return // no sessions here, or a pool this replica's config does not have
		}
		s.sessions.Learn(m.P, m.ID, m.D)
		x.learned.Add(1)
	}
}
