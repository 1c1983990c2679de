package openai

// vLLM (and SGLang, TensorRT-LLM) reuse a prompt's cached KV blocks only
// for a request with the same top-level "cache_salt" as the one that left
// them, in chat completions, completions, embeddings and Responses
// requests alike. A gateway that salts each tenant's requests with a
// value of its own keeps tenants from timing each other's prompts; it
// must then never let a client's own cache_salt through as sent, or a
// client could send another tenant's.

var (
	saltMember = []byte(`"cache_salt":"`)
	saltQuote  = []byte(`"`)
	saltEnd    = []byte(`",`)
)

// SaltEdits are the edits that set a request's cache_salt, in order.
type SaltEdits [3]Edit

// ClientSalt is the cache_salt r (from Extract) carries: its JSON string
// token, quotes included, or nil when there is none (or it is null). The
// error (400, param cache_salt) is for a cache_salt given more than once,
// which upstream parsers resolve differently, or one that is not a
// non-empty string, which vLLM refuses.
func ClientSalt(body []byte, r *Request) ([]byte, *Error) {
	switch {
	case r.saltGiven == 0:
		return nil, nil
	case r.saltGiven > 1:
		return nil, invalid("cache_salt", "cache_salt is given more than once; give it once")
	}
	tok := body[r.CacheSalt.Start:r.CacheSalt.End]
	switch {
	case tok[0] == 'n':
		return nil, nil
	case tok[0] != '"' || len(tok) < 3:
		return nil, invalid("cache_salt", "cache_salt must be a non-empty string")
	}
	return tok, nil
}

// Salt returns the edits that make the request r (from Extract(body))
// carry cache_salt salt, whatever it carried: its value replaced where it
// has one, the member inserted after the object's '{' where it has none.
// salt is the content of a JSON string that needs no escaping (such as
// hexadecimal digits), and the edits point into it. r must have passed
// ClientSalt, which refuses a cache_salt given twice. They never overlap
// r.ModelSpan or UsageEdit's edit; where one of those is at the same
// place, apply it first.
func Salt(r *Request, salt []byte) SaltEdits {
	if r.saltGiven == 0 {
		at := Span{r.open + 1, r.open + 1} // a valid request has its model after the '{'
		return SaltEdits{{at, saltMember}, {at, salt}, {at, saltEnd}}
	}
	end := Span{r.CacheSalt.End, r.CacheSalt.End}
	return SaltEdits{{r.CacheSalt, saltQuote}, {end, salt}, {end, saltQuote}}
}
