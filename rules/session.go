package rules

import (
	"container/list"
	"sync"
)

// Sessions remembers, per session id, the route a conversation was sent
// to with confidence, for a number of later turns: a bounded LRU. It is
// safe for concurrent use. It outlives a Set: the gateway keeps one across
// reloads while the settings it was made with stay the same, so an edit to
// the rules or the config does not drop every conversation.
type Sessions struct {
	cfg  Session
	mu   sync.Mutex
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

// Settings are the settings the store was made with.
func (s *Sessions) Settings() Session { return s.cfg }

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

// Apply records a confident decision for the session id, or replaces a
// decision that is not confident with the session's route while it has
// turns left (reason ReasonSession).
func (s *Sessions) Apply(id string, d Decision) Decision {
	if id == "" || len(id) > 256 {
		return d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if confident(d) {
		if e, ok := s.byID[id]; ok {
			st := e.Value.(*session)
			st.d, st.turns = d, s.cfg.Turns
			s.ll.MoveToFront(e)
		} else {
			s.byID[id] = s.ll.PushFront(&session{id: id, d: d, turns: s.cfg.Turns})
			if s.ll.Len() > s.cfg.Size {
				old := s.ll.Back()
				s.ll.Remove(old)
				delete(s.byID, old.Value.(*session).id)
			}
		}
		return d
	}
	e, ok := s.byID[id]
	if !ok {
		return d
	}
	st := e.Value.(*session)
	if st.turns <= 0 {
		return d
	}
	st.turns--
	s.ll.MoveToFront(e)
	kept := st.d
	kept.Reason = ReasonSession
	kept.Class, kept.Score, kept.Tier = d.Class, d.Score, d.Tier
	return kept
}

// Len is the number of sessions remembered.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len()
}
