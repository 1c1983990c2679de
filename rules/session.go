package rules

import (
	"container/list"
	"sync"
)

// sessions remembers, per session id, the route a conversation was sent to
// with confidence, for a number of later turns: a bounded LRU.
type sessions struct {
	mu    sync.Mutex
	size  int
	turns int
	ll    *list.List // front: most recently used
	byID  map[string]*list.Element
}

type session struct {
	id    string
	d     Decision
	turns int
}

func newSessions(size, turns int) *sessions {
	return &sessions{size: size, turns: turns, ll: list.New(), byID: map[string]*list.Element{}}
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

// apply records a confident decision for the session, or replaces a
// decision that is not confident with the session's route while it has
// turns left.
func (s *sessions) apply(id string, d Decision, tr *Trace) Decision {
	if id == "" || len(id) > 256 {
		return d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if confident(d) {
		if e, ok := s.byID[id]; ok {
			st := e.Value.(*session)
			st.d, st.turns = d, s.turns
			s.ll.MoveToFront(e)
		} else {
			s.byID[id] = s.ll.PushFront(&session{id: id, d: d, turns: s.turns})
			if s.ll.Len() > s.size {
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
	if tr != nil {
		tr.Session = id
	}
	return kept
}

// len is the number of sessions remembered.
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len()
}
