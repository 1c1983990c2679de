package router

import (
	"sync"

	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/pool"
	"github.com/triagegw/triage/router/proxy"
)

// keys recycles prefix keys: a Key is 1 KiB, too big to make per request.
var keys = sync.Pool{New: func() any { return new(pool.Key) }}

// affinity gives fr the prefix key of the request whose body is body
// (req from openai.Extract on it), when e's pool balances by prefix, and
// asks for X-Triage-Replica-Choice when explain is set. The key covers
// what vLLM will find in its prefix cache: a chat request's messages in
// order (a conversation's next turn extends them), a completion's prompt,
// a Responses request's input, and, when part is not 0, the tenant the
// replica keeps them for (a salted request's; exchange.isolate). Give the
// key it returns (nil: none) to unkey once the request has been forwarded.
func affinity(fr *proxy.Request, e *poolEntry, body []byte, req *openai.Request, explain bool, part uint64) *pool.Key {
	fr.ExplainChoice = explain
	if e.pool.Config().Balance != pool.BalancePrefix {
		return nil
	}
	var prompt openai.Span
	conv := 0
	switch {
	case req.Messages.Len() > 0:
		prompt = req.Messages
		if end := openai.FirstUserEnd(body, req); end > 0 {
			conv = end - prompt.Start
		}
	case req.Prompt.Len() > 0:
		prompt = req.Prompt
	case req.Input.Len() > 0:
		prompt = req.Input
	default:
		return nil
	}
	k := keys.Get().(*pool.Key)
	e.pool.Key(k, body[prompt.Start:prompt.End], conv)
	k.Partition(part)
	fr.Key = k
	return k
}

// unkey recycles a key affinity returned.
func unkey(k *pool.Key) {
	if k != nil {
		keys.Put(k)
	}
}
