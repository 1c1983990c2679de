package router

import (
	"errors"
	"strconv"
	"sync"
	"unsafe"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/rules"
)

// ErrUnknownModel is the decision for a model no pool serves when there is
// no default pool: the client gets 404 model_not_found.
var ErrUnknownModel = errors.New("router: no pool serves the model")

// modelTable routes by the model name: a pool's model or alias picks the
// pool; anything else goes to the default pool when there is one.
type modelTable struct {
	models map[string]*poolEntry
	def    *poolEntry
}

func (m *modelTable) decide(req *openai.Request) (rules.Decision, error) {
	var e *poolEntry
	var ok bool
	if req.ModelEscaped {
		e, ok = m.models[req.ModelName()]
	} else {
		e, ok = m.models[string(req.Model)] // no allocation
	}
	switch {
	case ok:
		return rules.Decision{Pool: e.pool.Name(), Reason: rules.ReasonExplicitModel}, nil
	case m.def != nil:
		return rules.Decision{Pool: m.def.pool.Name(), Reason: rules.ReasonDefault}, nil
	}
	return rules.Decision{}, ErrUnknownModel
}

// textPool holds the buffers the conversation text is extracted into.
var textPool = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// signals extracts what the rules read of an OpenAI request into sig: the
// conversation text through the rules' window, into a pooled buffer that
// release returns (sig.Text is valid until then).
func (s *snapshot) signals(alias string, body []byte, req *openai.Request, h map[string][]string, sig *rules.Signals) (release func()) {
	bp := textPool.Get().(*[]byte)
	text := s.conv.AppendText((*bp)[:0], body, req)
	*sig = rules.Signals{Model: alias, Header: h}
	if len(text) > 0 {
		sig.Text = unsafe.String(&text[0], len(text))
	}
	if s.sessions != nil || s.split != nil { // a split is sticky by the conversation too
		if v := h[s.sessionHeader]; len(v) > 0 && s.sessionHeader != "" {
			sig.Session = v[0]
		} else if fp := openai.Fingerprint(body, req); fp != 0 {
			// No session id: the conversation's fingerprint (its system
			// prompt and first user turn) stands for one.
			var b [17]byte
			b[0] = '#'
			sig.Session = string(strconv.AppendUint(b[:1], fp, 36))
		}
	}
	return func() {
		if cap(text) <= 64<<10 {
			*bp = text[:0]
			textPool.Put(bp)
		}
	}
}
