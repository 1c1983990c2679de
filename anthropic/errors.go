package anthropic

import (
	"encoding/json"
	"net/http"
)

// Error types as Anthropic names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeTooLarge       = "request_too_large"
	TypeRateLimit      = "rate_limit_error"
	TypeAPI            = "api_error"
	TypeOverloaded     = "overloaded_error"
)

// Error is an Anthropic-shaped error: what the client sees. It is also an
// error value, so translation code can return it and the HTTP edge can send
// it unchanged.
type Error struct {
	Status  int    // HTTP status; not part of the body
	Type    string // one of the Type constants
	Message string // human-readable, safe to show to the client
}

func (e *Error) Error() string { return e.Message }

// Body renders {"type":"error","error":{"type":...,"message":...}}.
func (e *Error) Body() []byte {
	return e.appendJSON(make([]byte, 0, 64+len(e.Message)))
}

func (e *Error) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"message":`...)
	dst = appendString(dst, e.Message)
	return append(dst, "}}"...)
}

// invalid is the 400 for a request that cannot be translated; msg names the
// field, as Anthropic's own messages do.
func invalid(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: msg}
}

// badUpstream is the 502 for an upstream response that cannot be
// translated: the client did nothing wrong.
func badUpstream(msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Type: TypeAPI, Message: "upstream response could not be translated: " + msg}
}

// TypeForStatus is the Anthropic error type for an HTTP status.
func TypeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return TypeInvalidRequest
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypePermission
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case http.StatusTooManyRequests:
		return TypeRateLimit
	case 529:
		return TypeOverloaded
	}
	if status >= 500 {
		return TypeAPI
	}
	return TypeInvalidRequest
}

// upstreamError covers the shapes upstreams use: OpenAI's
// {"error":{"message":...}}, vLLM's flat {"object":"error","message":...},
// and the odd {"error":"..."}.
type upstreamError struct {
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
}

// FromOpenAIError maps an upstream error response to Anthropic's shape. The
// type follows the status (the upstream's own type names are OpenAI's and
// mean nothing to an Anthropic client); the upstream's message is kept when
// one can be found, since it is usually the most useful thing to show.
func FromOpenAIError(status int, body []byte) *Error {
	e := &Error{Status: status, Type: TypeForStatus(status)}
	var u upstreamError
	if json.Unmarshal(body, &u) == nil {
		e.Message = u.Message
		if len(u.Error) > 0 {
			var inner struct {
				Message string `json:"message"`
			}
			var s string
			if json.Unmarshal(u.Error, &inner) == nil && inner.Message != "" {
				e.Message = inner.Message
			} else if json.Unmarshal(u.Error, &s) == nil && s != "" {
				e.Message = s
			}
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
		if e.Message == "" {
			e.Message = "upstream error"
		}
	}
	return e
}
