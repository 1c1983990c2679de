package rules

import (
	"container/list"
	"sync"
)

// Sessions remembers, per principal and session id, the route a
// conversation was sent to with confidence, for a number of later turns: a
// bounded LRU. A session belongs to the principal whose request recorded
// it: another principal sending the same id (or the same conversation,
// whose fingerprint stands for an id) neither keeps nor moves its route.
//
// A store outlives the Sets that decide with it (Signals.Sessions): its
// owner (the gateway) keeps one for its whole life and Configures it as
// the rules' session settings change, so a reload drops no conversation.
// A session remembers its route by name, and the Set deciding a later turn
// sends it where that route goes now: a route whose pool changed takes the
// conversation along, and a session whose route is gone ends. It is safe
// for concurrent use.
type Sessions struct {
	// Recorded, when set, is told each decision recorded as a session's
	// route (what other replicas must Learn for the conversation to keep
	// its route whichever replica takes its next turn). It is called on the
	// deciding goroutine, outside the store's lock, and must not block.
	// Set it before the store is used.
	Recorded func(principal, id string, d Decision)

	mu   sync.Mutex
	cfg  Session
	ll   *list.List // front: most recently used
	byID map[string]*list.Element
}

type session struct {
	id    string
	d     Decision
	turns int
}

// NewSessions returns an empty store with cfg's turns and size.
func NewSessions(cfg Session) *Sessions {
	return &Sessions{cfg: cfg, ll: list.New(), byID: map[string]*list.Element{}}
}

// Configure puts cfg's settings in effect, keeping the sessions
// remembered: a new size drops the least recently used past it; new turns
// apply to the routes recorded from now on (a session keeps the turns it
// has left).
func (s *Sessions) Configure(cfg Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	s.trim()
}

// confident reports whether d settles a session's route by itself.
func confident(d Decision) bool {
	if d.Route == "" {
		return false
	}
	switch d.Reason {
	case ReasonTier1Confident, ReasonRule:
		return true
	case ReasonBelowFloor, ReasonClassRequiresTier2:
		return d.Tier == 2 // tier 2 cleared its floor
	}
	return false
}

// key is the store's key for principal's session id ("" without access
// control); ok is false when either is too long to remember.
func sessionKey(principal, id string) (string, bool) {
	if id == "" || len(id) > maxSessionID || len(principal) > maxSessionID {
		return "", false
	}
	if principal == "" {
		return id, true
	}
	return principal + "\x00" + id, true // NUL: in neither a header value nor a principal's name
}

// apply records a confident decision d as the route of principal's
// session id, or replaces a decision that is not confident with the
// session's route while it has turns left (reason ReasonSession), sent
// where set has that route go now. A kept decision carries the class the
// session's route was decided for in SessionClass, so that what follows a
// class (a tenant's pin) follows the conversation.
func (s *Sessions) apply(set *Set, principal, id string, d Decision) Decision {
	key, ok := sessionKey(principal, id)
	if !ok {
		return d
	}
	s.mu.Lock()
	if confident(d) {
		s.record(key, d)
		s.mu.Unlock()
		if s.Recorded != nil {
			s.Recorded(principal, id, d)
		}
		return d
	}
	defer s.mu.Unlock()
	e, ok := s.byID[key]
	if !ok {
		return d
	}
	st := e.Value.(*session)
	if st.turns <= 0 {
		return d
	}
	r := set.route(st.d.Route)
	if r == nil { // the route is gone: the conversation is decided afresh
		s.ll.Remove(e)
		delete(s.byID, key)
		return d
	}
	st.turns--
	s.ll.MoveToFront(e)
	kept := st.d
	kept.Pool, kept.Fallback, kept.Block, kept.Pinned = r.pool, r.fallback, r.block, false
	kept.Reason = ReasonSession
	kept.SessionClass = st.d.Class
	kept.Class, kept.Score, kept.Tier = d.Class, d.Score, d.Tier
	return kept
}

// maxSessionID bounds the session ids remembered.
const maxSessionID = 256

// Learn records a confident decision another replica made for
// principal's session id, as if this one had made it. Anything else is
// ignored: a replica only shares what it recorded (Recorded).
func (s *Sessions) Learn(principal, id string, d Decision) {
	id, ok := sessionKey(principal, id)
	if !ok || !confident(d) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(id, d)
}

// record makes d the session's route with its turns renewed; s.mu is held.
func (s *Sessions) record(id string, d Decision) {
	if e, ok := s.byID[id]; ok {
		st := e.Value.(*session)
		st.d, st.turns = d, s.cfg.Turns
		s.ll.MoveToFront(e)
		return
	}
	s.byID[id] = s.ll.PushFront(&session{id: id, d: d, turns: s.cfg.Turns})
	s.trim()
}

// trim drops the least recently used sessions past the size; s.mu is held.
func (s *Sessions) trim() {
	for s.ll.Len() > max(s.cfg.Size, 0) {
		old := s.ll.Back()
		s.ll.Remove(old)
		delete(s.byID, old.Value.(*session).id)
	}
}

// Len is the number of sessions remembered.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len()
}
