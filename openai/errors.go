package openai

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/triagegw/triage/internal/jsonscan"
)

// Error types as OpenAI names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
	TypeRateLimit      = "rate_limit_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
)

// Error is an OpenAI-shaped error: what the client sees, never the internal
// cause (that goes to the log). It is also an error value, so parsing code
// can return it and the HTTP edge can send it unchanged.
type Error struct {
	Status  int    // HTTP status; not part of the body
	Message string // human-readable, safe to show to the client
	Type    string // one of the Type constants
	Param   string // the offending request field, if any
	Code    string // machine-readable code, if any
}

func (e *Error) Error() string { return e.Message }

// MarshalJSON renders {"error":{"message","type","param","code"}} with null
// for an empty param or code, as OpenAI does.
func (e *Error) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(nil), nil
}

// AppendJSON appends the error body to dst.
func (e *Error) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	return append(dst, "}}\n"...)
}

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendString(dst, s)
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // strings always marshal
	return append(dst, b...)
}

// WriteError sends e as the whole response. The caller must not have written
// anything yet.
func WriteError(w http.ResponseWriter, e *Error) {
	body := e.AppendJSON(make([]byte, 0, 128))
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// Errorf-free constructors for the errors the gateway sends. Each names its
// status, so call sites read as what happened.

func invalid(param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Type: TypeInvalidRequest, Param: param, Code: "invalid_request"}
}

func malformed(err error) *Error {
	msg := "request body is not valid JSON: " + err.Error()
	if se, ok := err.(*jsonscan.SyntaxError); ok {
		msg += " (at byte " + strconv.Itoa(se.Offset) + ")"
	}
	return &Error{Status: http.StatusBadRequest, Message: msg, Type: TypeInvalidRequest, Code: "invalid_json"}
}

func fieldType(param, want string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: "'" + param + "' must be " + want, Type: TypeInvalidRequest, Param: param, Code: "invalid_type"}
}

// ModelNotFound is the 404 for a model no pool serves when there is no
// default pool.
func ModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Message: "The model '" + model + "' does not exist or you do not have access to it.", Type: TypeInvalidRequest, Param: "model", Code: "model_not_found"}
}

// TooLarge is the 413 for a body over the configured cap.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Message: "request body exceeds the limit of " + strconv.FormatInt(limit, 10) + " bytes", Type: TypeInvalidRequest, Code: "request_too_large"}
}

// Blocked is the 400 a block route answers: the request is refused by a
// routing rule (a guard class, a keyword, a pattern), nothing was sent
// upstream.
func Blocked(route, message string) *Error {
	msg := "request blocked by route '" + route + "'"
	if message != "" {
		msg += ": " + message
	}
	return &Error{Status: http.StatusBadRequest, Message: msg, Type: TypeInvalidRequest, Param: "messages", Code: "blocked"}
}

// HeadersTooLarge is the 431 for a request whose headers exceed the
// gateway's bounds (what it would forward to a replica).
func HeadersTooLarge(what string) *Error {
	return &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Message: "request headers too large: " + what, Type: TypeInvalidRequest, Code: "request_header_fields_too_large"}
}

// NoBackend is the 503 when a pool has no healthy replica.
func NoBackend(pool string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Message: "no healthy upstream for pool '" + pool + "'; retry later", Type: TypeServer, Code: "no_healthy_upstream"}
}

// BadGateway is the 502 when the upstream could not be reached or answered
// with something that is not HTTP.
func BadGateway() *Error {
	return &Error{Status: http.StatusBadGateway, Message: "the upstream model server could not be reached or gave an invalid response", Type: TypeServer, Code: "bad_gateway"}
}

// GatewayTimeout is the 504 when the upstream did not answer in time.
func GatewayTimeout() *Error {
	return &Error{Status: http.StatusGatewayTimeout, Message: "the upstream model server did not answer in time", Type: TypeServer, Code: "upstream_timeout"}
}

// Internal is the 500 for a gateway fault; the cause is logged, not sent.
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Message: "internal gateway error", Type: TypeServer, Code: "internal_error"}
}

// NotFound is the 404 for an unknown path.
func NotFound(method, path string) *Error {
	return &Error{Status: http.StatusNotFound, Message: "Invalid URL (" + method + " " + path + ")", Type: TypeInvalidRequest, Code: "unknown_url"}
}

// MethodNotAllowed is the 405 for a known path with the wrong method.
func MethodNotAllowed(method, path string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Message: "method " + method + " is not allowed on " + path, Type: TypeInvalidRequest, Code: "method_not_allowed"}
}

// BadRequest is a 400 with a message, for request problems found outside
// Extract (an unreadable body, say).
func BadRequest(msg string) *Error { return invalid("", msg) }
