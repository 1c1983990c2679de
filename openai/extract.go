package openai

import "github.com/triagegw/triage/internal/jsonscan"

// Span is the half-open byte range [Start, End) of a JSON value inside a
// body. The zero Span means the field was absent.
type Span struct{ Start, End int }

// Len is the span's length in bytes; 0 when absent.
func (s Span) Len() int { return s.End - s.Start }

// Request is what the router needs from a request body. Byte slices and spans
// point into the body that was given to Extract; nothing is copied.
type Request struct {
	// Model is the model name as it appears between the quotes. When
	// ModelEscaped is set it still holds JSON escapes; use ModelName.
	Model        []byte
	ModelSpan    Span // the model token, quotes included
	ModelEscaped bool
	modelTok     []byte
	// Stream reports "stream": true.
	Stream bool
	// StreamOptions is the "stream_options" value; open is where the
	// top-level object's '{' is, for UsageEdit.
	StreamOptions Span
	open          int
	// Messages, Prompt and Input locate the prompt-bearing fields of chat,
	// completions and embeddings requests.
	Messages, Prompt, Input Span
	// Instructions and PreviousResponseID are a Responses request's
	// system prompt and the response it continues (a JSON string token,
	// quotes included, when it is a string).
	Instructions, PreviousResponseID Span
	// CacheSalt is the "cache_salt" value (the last, when given more
	// than once: saltGiven counts them), for SaltEdits.
	CacheSalt Span
	saltGiven int
	// MaxTokens is the largest of max_tokens, max_completion_tokens and
	// max_output_tokens given as whole numbers (0: none), for admitting a
	// request against token limits before it runs.
	MaxTokens int64
}

// ModelName returns the decoded model name. It allocates; the hot path looks
// names up with string(r.Model) in a map index instead, which does not.
func (r *Request) ModelName() string {
	if !r.ModelEscaped {
		return string(r.Model)
	}
	return string(decodeToken(r.modelTok))
}

// Extract validates body as a JSON object and pulls out the routing fields in
// a single pass, without decoding any other value. It rejects what the
// upstream would reject as malformed (any invalid JSON, a body that is not an
// object) and what the gateway cannot route (a missing or non-string model,
// a stream that is neither a boolean nor null). Duplicate keys resolve to
// the last, as in encoding/json and Python's json module.
//
// The error, when not nil, is an *Error with status 400.
func Extract(body []byte) (Request, error) {
	var r Request
	s := jsonscan.New(body)
	if s.WS() >= len(body) || body[s.Pos()] != '{' {
		return r, notObject(&s)
	}
	r.open = s.Pos()
	var refused *Error
	ok := s.Object(func(key []byte) bool {
		f := topField(key) // before the value can overwrite a decoded key
		c := s.Peek()
		vstart := s.Pos()
		var tok []byte
		var esc jsonscan.Holds
		ok := false
		if c == '"' {
			tok, esc, ok = s.Token()
		} else {
			ok = s.Skip()
		}
		if !ok {
			return false
		}
		span := Span{vstart, s.Pos()}
		switch f {
		case fieldModel:
			if c != '"' {
				refused = fieldType("model", "a string")
				return false
			}
			r.ModelSpan, r.Model, r.ModelEscaped = span, tok[1:len(tok)-1], esc&jsonscan.Escaped != 0
			r.modelTok = tok
		case fieldStream:
			switch c {
			case 't':
				r.Stream = true
			case 'f', 'n':
				r.Stream = false
			default:
				refused = fieldType("stream", "a boolean")
				return false
			}
		case fieldStreamOptions:
			r.StreamOptions = span
		case fieldMessages:
			if c != '[' {
				refused = fieldType("messages", "an array")
				return false
			}
			r.Messages = span
		case fieldPrompt:
			r.Prompt = span
		case fieldInput:
			r.Input = span
		case fieldInstructions:
			r.Instructions = span
		case fieldPreviousResponseID:
			r.PreviousResponseID = span
		case fieldCacheSalt:
			r.CacheSalt = span
			r.saltGiven++
		case fieldMaxTokens:
			// Not a whole number: the upstream judges it.
			r.MaxTokens = max(r.MaxTokens, wholeNumber(body[vstart:s.Pos()]))
		}
		return true
	})
	if refused != nil {
		return r, refused
	}
	if !ok || !s.End() {
		return r, malformed(s.Err())
	}
	if r.ModelSpan.Len() == 0 {
		return r, &Error{Status: 400, Message: "you must provide a model parameter", Type: TypeInvalidRequest, Param: "model", Code: "missing_model"}
	}
	return r, nil
}

// notObject is Extract's error for a body that is not a JSON object, s at
// its first value: none, not JSON, or JSON of another type.
func notObject(s *jsonscan.Scanner) *Error {
	if s.Pos() >= len(s.Bytes()) {
		return invalid("", "request body is empty; expected a JSON object")
	}
	if !s.Skip() || !s.End() {
		return malformed(s.Err())
	}
	return invalid("", "request body must be a JSON object")
}

// The top-level fields Extract reads.
const (
	fieldOther = iota
	fieldModel
	fieldStream
	fieldStreamOptions
	fieldMessages
	fieldPrompt
	fieldInput
	fieldInstructions
	fieldPreviousResponseID
	fieldMaxTokens
	fieldCacheSalt
)

func topField(key []byte) int {
	switch string(key) {
	case "model":
		return fieldModel
	case "stream":
		return fieldStream
	case "stream_options":
		return fieldStreamOptions
	case "messages":
		return fieldMessages
	case "prompt":
		return fieldPrompt
	case "input":
		return fieldInput
	case "instructions":
		return fieldInstructions
	case "previous_response_id":
		return fieldPreviousResponseID
	case "max_tokens", "max_completion_tokens", "max_output_tokens":
		return fieldMaxTokens
	case "cache_salt":
		return fieldCacheSalt
	}
	return fieldOther
}

// wholeNumber is the value of a JSON number token made of digits only, up
// to 10^15; anything else is 0.
func wholeNumber(tok []byte) int64 {
	if len(tok) > 15 {
		return 0
	}
	n, _ := digits(tok)
	return n
}

// decodeToken decodes a JSON string token (quotes included) with escapes.
func decodeToken(tok []byte) []byte {
	return jsonscan.AppendUnquote(nil, tok)
}
