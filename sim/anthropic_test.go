package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
)

// anthropicHeaders are the headers every Messages request here carries.
var anthropicHeaders = map[string]string{"anthropic-version": "2023-06-01", "x-api-key": "sk-ant"}

func withHeaders(extra map[string]string) map[string]string {
	h := map[string]string{}
	for k, v := range anthropicHeaders {
		h[k] = v
	}
	for k, v := range extra {
		if v == "" {
			delete(h, k)
			continue
		}
		h[k] = v
	}
	return h
}

func newAnthropicSim(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	o.API = APIAnthropic
	if o.APIKey == "" {
		o.APIKey = "sk-ant"
	}
	s, ts := newSim(t, o)
	return s, ts.URL
}

// checkAnthropicError checks Anthropic's error shape: type error, the
// error's type and message, and request_id equal to the request-id header.
func checkAnthropicError(t *testing.T, resp *http.Response, status int, typ, msgContains string) {
	t.Helper()
	body := readAll(t, resp)
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q, want %d; body %s", resp.StatusCode, resp.Header.Get("Content-Type"), status, body)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if e.Type != "error" || e.Error.Type != typ || !strings.Contains(e.Error.Message, msgContains) {
		t.Errorf("error %s, want type %s and a message with %q", body, typ, msgContains)
	}
	if id := resp.Header.Get("request-id"); !strings.HasPrefix(id, "req_") || e.RequestID != id {
		t.Errorf("request_id %q, request-id header %q", e.RequestID, id)
	}
}

const userHello = `{"role":"user","content":"hello there"}`

func TestAnthropicMessage(t *testing.T) {
	s, url := newAnthropicSim(t, Options{Name: "r1", Chunks: 5})
	resp := post(t, context.Background(), url+"/v1/messages", `{"model":"test-model","max_tokens":100,"system":"be brief","messages":[`+userHello+`]}`, anthropicHeaders)
	b := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Sim-Replica") != "r1" ||
		!strings.HasPrefix(resp.Header.Get("request-id"), "req_") {
		t.Fatalf("%d %v: %s", resp.StatusCode, resp.Header, b)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var id string
	_ = json.Unmarshal(m["id"], &id)
	delete(m, "id")
	got, _ := json.Marshal(m)
	const want = `{"content":[{"type":"text","text":"[r1] lorem ipsum dolor sit"}],"model":"test-model","role":"assistant","stop_reason":"end_turn","stop_sequence":null,` +
		`"type":"message","usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5}}`
	if !strings.HasPrefix(id, "msg_") || string(got) != want {
		t.Errorf("message %s\nwant (id aside) %s", b, want)
	}
	if st := s.Stats(); st != (Stats{Requests: 1, Completed: 1}) {
		t.Errorf("stats %+v", st)
	}
}

type messageOut struct {
	Content []struct {
		Type  string          `json:"type"`
		Text  *string         `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

const (
	weatherAnthropic = `{"name":"get_weather","description":"the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}`
	timeAnthropic    = `{"name":"get_time","input_schema":{"type":"object","properties":{"zone":{"type":"string"}}}}`
	searchServerTool = `{"type":"web_search_20250305","name":"web_search","max_uses":1}`
)

// TestAnthropicAnswers: the stop reasons, and the tool rule: a tool_use
// block unless tool_choice is none or the last turn answers tool results.
func TestAnthropicAnswers(t *testing.T) {
	const toolTurns = `{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"x"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny and warm"}]}`
	tests := []struct {
		name   string
		body   string
		stop   string
		seq    string
		text   string // for text answers
		tool   string // for tool_use answers
		input  string
		outTok int
	}{
		{"max_tokens", `{"max_tokens":2,"messages":[` + userHello + `]}`, "max_tokens", "", "[r1] lorem", "", "", 2},
		{"stop sequence", `{"max_tokens":100,"stop_sequences":["zzz","sum do"],"messages":[` + userHello + `]}`, "stop_sequence", "sum do", "[r1] lorem ip", "", "", 3},
		{"earliest stop sequence", `{"max_tokens":100,"stop_sequences":["dolor","lorem"],"messages":[` + userHello + `]}`, "stop_sequence", "lorem", "[r1] ", "", "", 1},
		{"stop sequence past max_tokens", `{"max_tokens":2,"stop_sequences":["dolor"],"messages":[` + userHello + `]}`, "max_tokens", "", "[r1] lorem", "", "", 2},
		{"tools", `{"max_tokens":100,"tools":[` + weatherAnthropic + `,` + timeAnthropic + `],"messages":[` + userHello + `]}`, "tool_use", "", "", "get_weather", `{"city":"sim"}`, 5},
		{"tool_choice any", `{"max_tokens":100,"tool_choice":{"type":"any"},"tools":[` + searchServerTool + `,` + timeAnthropic + `],"messages":[` + userHello + `]}`, "tool_use", "", "", "get_time", `{"zone":"sim"}`, 5},
		{"tool_choice tool", `{"max_tokens":100,"tool_choice":{"type":"tool","name":"get_time"},"tools":[` + weatherAnthropic + `,` + timeAnthropic + `],"messages":[` + userHello + `]}`, "tool_use", "", "", "get_time", `{"zone":"sim"}`, 5},
		{"tool_choice none", `{"max_tokens":100,"tool_choice":{"type":"none"},"tools":[` + weatherAnthropic + `],"messages":[` + userHello + `]}`, "end_turn", "", "[r1] lorem ipsum dolor sit", "", "", 5},
		{"only server tools", `{"max_tokens":100,"tools":[` + searchServerTool + `],"messages":[` + userHello + `]}`, "end_turn", "", "[r1] lorem ipsum dolor sit", "", "", 5},
		{"after a tool result", `{"max_tokens":100,"tools":[` + weatherAnthropic + `],"messages":[` + toolTurns + `]}`, "end_turn", "", "[r1] lorem ipsum dolor sit", "", "", 5},
		{"continuing the assistant", `{"max_tokens":100,"tools":[` + weatherAnthropic + `],"messages":[` + userHello + `,{"role":"assistant","content":"Well,"}]}`, "end_turn", "", "[r1] lorem ipsum dolor sit", "", "", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, url := newAnthropicSim(t, Options{Name: "r1", Chunks: 5})
			resp := post(t, context.Background(), url+"/v1/messages", strings.Replace(tc.body, "{", `{"model":"test-model",`, 1), anthropicHeaders)
			b := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var m messageOut
			if err := json.Unmarshal(b, &m); err != nil || len(m.Content) != 1 {
				t.Fatalf("%v: %s", err, b)
			}
			if m.StopReason != tc.stop || (tc.seq == "") != (m.StopSequence == nil) || (m.StopSequence != nil && *m.StopSequence != tc.seq) || m.Usage.OutputTokens != tc.outTok {
				t.Errorf("message %s, want stop_reason %s, stop_sequence %q, %d output tokens", b, tc.stop, tc.seq, tc.outTok)
			}
			c := m.Content[0]
			if tc.tool == "" {
				if c.Type != "text" || c.Text == nil || *c.Text != tc.text {
					t.Errorf("content %s, want text %q", b, tc.text)
				}
				return
			}
			if c.Type != "tool_use" || !strings.HasPrefix(c.ID, "toolu_") || c.Name != tc.tool || string(c.Input) != tc.input || c.Text != nil {
				t.Errorf("content %s, want tool_use %s %s", b, tc.tool, tc.input)
			}
		})
	}
}

func TestAnthropicStream(t *testing.T) {
	for _, tc := range []struct {
		name, body, block, delta, joined, stop string
		pieces                                 int
	}{
		{"text", `{"model":"test-model","max_tokens":100,"stream":true,"messages":[` + userHello + `]}`,
			`{"type":"text","text":""}`, "text_delta", "[r1] lorem ipsum", "end_turn", 3},
		{"tool_use", `{"model":"test-model","max_tokens":100,"stream":true,"tools":[` + weatherAnthropic + `],"messages":[` + userHello + `]}`,
			`{"type":"tool_use","id":"toolu_*","name":"get_weather","input":{}}`, "input_json_delta", `{"city":"sim"}`, "tool_use", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, url := newAnthropicSim(t, Options{Name: "r1", Chunks: 3})
			resp := post(t, context.Background(), url+"/v1/messages", tc.body, anthropicHeaders)
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream; charset=utf-8" {
				t.Fatalf("%d %q", resp.StatusCode, ct)
			}
			events, err := readNamedEvents(resp.Body)
			if err != nil {
				t.Fatalf("%v after %q", err, events)
			}
			names := []string{"message_start", "content_block_start", "ping"}
			for range tc.pieces {
				names = append(names, "content_block_delta")
			}
			names = append(names, "content_block_stop", "message_delta", "message_stop")
			var got []string
			for _, ev := range events {
				got = append(got, ev.name)
				var typ struct{ Type string }
				if err := json.Unmarshal([]byte(ev.data), &typ); err != nil || typ.Type != ev.name {
					t.Errorf("event %s data %s", ev.name, ev.data)
				}
			}
			if !reflect.DeepEqual(got, names) {
				t.Fatalf("events %q, want %q", got, names)
			}
			var start struct {
				Message struct {
					ID           string          `json:"id"`
					Content      json.RawMessage `json:"content"`
					StopReason   json.RawMessage `json:"stop_reason"`
					StopSequence json.RawMessage `json:"stop_sequence"`
					Usage        struct {
						InputTokens  int `json:"input_tokens"`
						OutputTokens int `json:"output_tokens"`
					} `json:"usage"`
				} `json:"message"`
			}
			_ = json.Unmarshal([]byte(events[0].data), &start)
			if m := start.Message; !strings.HasPrefix(m.ID, "msg_") || string(m.Content) != "[]" || string(m.StopReason) != "null" ||
				string(m.StopSequence) != "null" || m.Usage.InputTokens != 2 || m.Usage.OutputTokens != 1 {
				t.Errorf("message_start %s", events[0].data)
			}
			block := events[1].data
			if i := strings.Index(block, `"toolu_`); i >= 0 {
				block = block[:i+7] + "*" + block[strings.IndexByte(block[i+1:], '"')+i+1:]
			}
			if want := `{"type":"content_block_start","index":0,"content_block":` + tc.block + `}`; block != want {
				t.Errorf("content_block_start %s, want %s", events[1].data, want)
			}
			if events[2].data != `{"type":"ping"}` {
				t.Errorf("ping %s", events[2].data)
			}
			var joined strings.Builder
			for _, ev := range events[3 : 3+tc.pieces] {
				var d struct {
					Index int `json:"index"`
					Delta struct {
						Type        string  `json:"type"`
						Text        *string `json:"text"`
						PartialJSON *string `json:"partial_json"`
					} `json:"delta"`
				}
				_ = json.Unmarshal([]byte(ev.data), &d)
				if d.Index != 0 || d.Delta.Type != tc.delta {
					t.Errorf("delta %s", ev.data)
				}
				switch {
				case d.Delta.Text != nil && d.Delta.PartialJSON == nil:
					joined.WriteString(*d.Delta.Text)
				case d.Delta.PartialJSON != nil && d.Delta.Text == nil:
					joined.WriteString(*d.Delta.PartialJSON)
				default:
					t.Errorf("delta %s", ev.data)
				}
			}
			if joined.String() != tc.joined {
				t.Errorf("deltas join to %q, want %q", joined.String(), tc.joined)
			}
			if e := events[3+tc.pieces].data; e != `{"type":"content_block_stop","index":0}` {
				t.Errorf("content_block_stop %s", e)
			}
			if e, want := events[4+tc.pieces].data, `{"type":"message_delta","delta":{"stop_reason":"`+tc.stop+`","stop_sequence":null},"usage":{"output_tokens":3}}`; e != want {
				t.Errorf("message_delta %s, want %s", e, want)
			}
			if e := events[5+tc.pieces].data; e != `{"type":"message_stop"}` {
				t.Errorf("message_stop %s", e)
			}
			waitStats(t, s, func(st Stats) bool { return st == Stats{Requests: 1, Completed: 1} })
		})
	}
}

func TestAnthropicErrors(t *testing.T) {
	const ok = `{"model":"test-model","max_tokens":10,"messages":[` + userHello + `]}`
	tests := []struct {
		name, path, body string
		hdr              map[string]string
		status           int
		typ, msg         string
	}{
		{"no api key", "/v1/messages", ok, withHeaders(map[string]string{"x-api-key": ""}), 401, "authentication_error", "x-api-key header is required"},
		{"wrong api key", "/v1/messages", ok, withHeaders(map[string]string{"x-api-key": "sk-other"}), 401, "authentication_error", "invalid x-api-key"},
		{"wrong bearer key", "/v1/messages", ok, withHeaders(map[string]string{"x-api-key": "", "Authorization": "Bearer sk-other"}), 401, "authentication_error", "invalid x-api-key"},
		{"no version", "/v1/messages", ok, withHeaders(map[string]string{"anthropic-version": ""}), 400, "invalid_request_error", "anthropic-version: header is required"},
		{"key beats X-Sim-Status", "/v1/messages", ok, withHeaders(map[string]string{"x-api-key": "", "X-Sim-Status": "529"}), 401, "authentication_error", "x-api-key"},
		{"no model", "/v1/messages", `{"max_tokens":10,"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "model: Field required"},
		{"empty model", "/v1/messages", `{"model":"","max_tokens":10,"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "model: String should have at least 1 character"},
		{"no max_tokens", "/v1/messages", `{"model":"test-model","messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "max_tokens: Field required"},
		{"max_tokens 0", "/v1/messages", `{"model":"test-model","max_tokens":0,"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "max_tokens"},
		{"no messages", "/v1/messages", `{"model":"test-model","max_tokens":10}`, nil, 400, "invalid_request_error", "messages: Field required"},
		{"empty messages", "/v1/messages", `{"model":"test-model","max_tokens":10,"messages":[]}`, nil, 400, "invalid_request_error", "messages"},
		{"system role", "/v1/messages", `{"model":"test-model","max_tokens":10,"messages":[{"role":"system","content":"x"}]}`, nil, 400, "invalid_request_error", "messages.0.role"},
		{"assistant first", "/v1/messages", `{"model":"test-model","max_tokens":10,"messages":[{"role":"assistant","content":"x"},` + userHello + `]}`, nil, 400, "invalid_request_error", `first message must use the "user" role`},
		{"two user turns", "/v1/messages", `{"model":"test-model","max_tokens":10,"messages":[` + userHello + `,` + userHello + `]}`, nil, 400, "invalid_request_error", `roles must alternate between "user" and "assistant", but found multiple "user" roles in a row`},
		{"no content", "/v1/messages", `{"model":"test-model","max_tokens":10,"messages":[{"role":"user"}]}`, nil, 400, "invalid_request_error", "messages.0.content: Field required"},
		{"block without type", "/v1/messages", `{"model":"test-model","max_tokens":10,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, nil, 400, "invalid_request_error", "messages.0.content.0.type"},
		{"bad system", "/v1/messages", `{"model":"test-model","max_tokens":10,"system":5,"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "system"},
		{"blank stop sequence", "/v1/messages", `{"model":"test-model","max_tokens":10,"stop_sequences":[" "],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "stop_sequences.0"},
		{"tool without schema", "/v1/messages", `{"model":"test-model","max_tokens":10,"tools":[{"name":"f"}],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "tools.0.input_schema: Field required"},
		{"tool without name", "/v1/messages", `{"model":"test-model","max_tokens":10,"tools":[{"input_schema":{"type":"object"}}],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "tools.0.name"},
		{"schema not an object", "/v1/messages", `{"model":"test-model","max_tokens":10,"tools":[{"name":"f","input_schema":{"type":"string"}}],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "tools.0.input_schema.type"},
		{"duplicate tools", "/v1/messages", `{"model":"test-model","max_tokens":10,"tools":[` + timeAnthropic + `,` + timeAnthropic + `],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "unique"},
		{"unknown tool_choice", "/v1/messages", `{"model":"test-model","max_tokens":10,"tool_choice":{"type":"some"},"tools":[` + timeAnthropic + `],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "tool_choice.type"},
		{"tool_choice of no tool", "/v1/messages", `{"model":"test-model","max_tokens":10,"tool_choice":{"type":"tool","name":"nope"},"tools":[` + timeAnthropic + `],"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "nope"},
		{"tool_choice any without tools", "/v1/messages", `{"model":"test-model","max_tokens":10,"tool_choice":{"type":"any"},"messages":[` + userHello + `]}`, nil, 400, "invalid_request_error", "requires tools"},
		{"malformed", "/v1/messages", `{"model":`, nil, 400, "invalid_request_error", "invalid JSON"},
		{"other model", "/v1/messages", `{"model":"claude-other","max_tokens":10,"messages":[` + userHello + `]}`, nil, 404, "not_found_error", "model: claude-other"},
		{"X-Sim-Status 529", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "529"}), 529, "overloaded_error", "X-Sim-Status"},
		{"X-Sim-Status 429", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "429"}), 429, "rate_limit_error", "X-Sim-Status"},
		{"X-Sim-Status 500", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "500"}), 500, "api_error", "X-Sim-Status"},
		{"X-Sim-Status 503", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "503"}), 503, "api_error", "X-Sim-Status"},
		{"X-Sim-Status 504", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "504"}), 504, "timeout_error", "X-Sim-Status"},
		{"X-Sim-Status 413", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "413"}), 413, "request_too_large", "X-Sim-Status"},
		{"X-Sim-Status 403", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "403"}), 403, "permission_error", "X-Sim-Status"},
		{"X-Sim-Status 422", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Status": "422"}), 422, "invalid_request_error", "X-Sim-Status"},
		{"bad X-Sim header", "/v1/messages", ok, withHeaders(map[string]string{"X-Sim-Chunks": "many"}), 400, "invalid_request_error", "X-Sim-Chunks"},
		{"openai path", "/v1/chat/completions", `{"messages":[` + userHello + `]}`, nil, 404, "not_found_error", "Not Found"},
		{"GET messages", "/v1/messages", "", nil, 405, "invalid_request_error", "Method Not Allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, url := newAnthropicSim(t, Options{})
			hdr := tc.hdr
			if hdr == nil {
				hdr = anthropicHeaders
			}
			var resp *http.Response
			if tc.body == "" {
				resp = do(t, http.MethodGet, url+tc.path)
			} else {
				resp = post(t, context.Background(), url+tc.path, tc.body, hdr)
			}
			checkAnthropicError(t, resp, tc.status, tc.typ, tc.msg)
		})
	}

	// The key may come as a bearer token.
	_, url := newAnthropicSim(t, Options{})
	resp := post(t, context.Background(), url+"/v1/messages", ok, withHeaders(map[string]string{"x-api-key": "", "Authorization": "Bearer sk-ant"}))
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Errorf("bearer key: %d %s", resp.StatusCode, b)
	}

	// Without Options.APIKey any key, or none, is accepted.
	s, err := New(Options{Model: testModel, API: APIAnthropic})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(`{"model":"test-model","max_tokens":10,"messages":[`+userHello+`]}`))
	req.Header.Set("anthropic-version", "2023-06-01")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Errorf("no key, no APIKey: %d %s", w.Code, w.Body)
	}

	// ErrorRate failures take the same shape.
	_, url = newAnthropicSim(t, Options{ErrorRate: 1, ErrorStatus: 529})
	checkAnthropicError(t, post(t, context.Background(), url+"/v1/messages", `{}`, anthropicHeaders), 529, "overloaded_error", "injected error 529")
}

// TestAnthropicDropsAndFaults: streams are cut among their deltas, and
// faults that send the answer send a Message.
func TestAnthropicDropsAndFaults(t *testing.T) {
	s, url := newAnthropicSim(t, Options{Name: "r1", Chunks: 4})
	stream := `{"model":"test-model","max_tokens":100,"stream":true,"messages":[` + userHello + `]}`
	for i, h := range []map[string]string{{"X-Sim-Drop-After": "1"}, {"X-Sim-Fault": "die-mid-stream"}} {
		resp := post(t, context.Background(), url+"/v1/messages", stream, withHeaders(h))
		events, err := readNamedEvents(resp.Body)
		resp.Body.Close()
		want := 4 + i // message_start, content_block_start, ping, then 1 or 2 deltas
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != want || events[want-1].name != "content_block_delta" {
			t.Errorf("%v: events %q (%v), want %d ending with a delta, then the cut", h, events, err, want)
		}
	}
	waitStats(t, s, func(st Stats) bool { return st == Stats{Requests: 2, Dropped: 1, Faults: 1} })

	_, ts := newSim(t, Options{Name: "r1", Chunks: 3, API: APIAnthropic})
	c := dialRaw(t, ts)
	if _, err := io.WriteString(c, rawPost("/v1/messages", `{"model":"test-model","max_tokens":9,"messages":[`+userHello+`]}`,
		"X-Sim-Fault: extra-response", "anthropic-version: 2023-06-01")); err != nil {
		t.Fatal(err)
	}
	wire, _, _ := readWire(t, c, 300*time.Millisecond)
	_, body, rest := cutResponse(t, wire)
	_, leaked, _ := cutResponse(t, rest)
	for _, tc := range []struct {
		body []byte
		text string
	}{{body, "[r1] lorem ipsum"}, {leaked, "LEAKED-r1"}} {
		var m messageOut
		if err := json.Unmarshal(tc.body, &m); err != nil || len(m.Content) != 1 || m.Content[0].Text == nil || *m.Content[0].Text != tc.text || m.StopReason != "end_turn" {
			t.Errorf("body %s (%v), want a Message saying %q", tc.body, err, tc.text)
		}
	}
}

func TestAnthropicModels(t *testing.T) {
	_, url := newAnthropicSim(t, Options{Model: "claude-sim"})
	resp := do(t, http.MethodGet, url+"/v1/models")
	b := readAll(t, resp)
	var out struct {
		Data []struct {
			Type, ID, DisplayName, CreatedAt string
		}
		HasMore bool   `json:"has_more"`
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || len(out.Data) != 1 || out.Data[0].ID != "claude-sim" ||
		out.Data[0].Type != "model" || out.HasMore || out.FirstID != "claude-sim" || out.LastID != "claude-sim" {
		t.Errorf("%d %s (%v)", resp.StatusCode, b, err)
	}
	if !strings.Contains(string(b), `"display_name":"claude-sim","created_at":"`) {
		t.Errorf("model card %s", b)
	}
}

// TestAnthropicSDK drives the anthropic mode with Anthropic's Go SDK:
// plain, streamed through its accumulator, tool use and its result, and
// errors.
func TestAnthropicSDK(t *testing.T) {
	_, url := newAnthropicSim(t, Options{Model: "claude-sim", Name: "r1", Chunks: 4, APIKey: "sk-ant-test"})
	client := anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     "claude-sim",
		MaxTokens: 100,
		System:    []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello there"))},
	}

	m, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.ID, "msg_") || m.StopReason != anthropic.StopReasonEndTurn || len(m.Content) != 1 || m.Content[0].Text != "[r1] lorem ipsum dolor" ||
		m.Usage.InputTokens != 4 || m.Usage.OutputTokens != 4 || string(m.Model) != "claude-sim" {
		t.Fatalf("message %s", m.RawJSON())
	}

	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	var text strings.Builder
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
			text.WriteString(d.Delta.Text)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if acc.StopReason != anthropic.StopReasonEndTurn || len(acc.Content) != 1 || acc.Content[0].Text != "[r1] lorem ipsum dolor" ||
		text.String() != acc.Content[0].Text || acc.Usage.InputTokens != 4 || acc.Usage.OutputTokens != 4 {
		t.Fatalf("accumulated %s", acc.RawJSON())
	}

	// Tool use, whole and streamed, then its result answered with text.
	params.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
		Name:        "get_time",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"zone": map[string]any{"type": "string"}}, Required: []string{"zone"}},
	}}}
	params.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "get_time"}}
	m, err = client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if m.StopReason != anthropic.StopReasonToolUse || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Name != "get_time" ||
		string(m.Content[0].Input) != `{"zone":"sim"}` {
		t.Fatalf("tool use %s", m.RawJSON())
	}
	stream = client.Messages.NewStreaming(ctx, params)
	acc = anthropic.Message{}
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if acc.StopReason != anthropic.StopReasonToolUse || len(acc.Content) != 1 || acc.Content[0].Name != "get_time" || string(acc.Content[0].Input) != `{"zone":"sim"}` {
		t.Fatalf("accumulated tool use %s", acc.RawJSON())
	}
	params.Messages = append(params.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(m.Content[0].ID, "12:00", false)))
	params.ToolChoice = anthropic.ToolChoiceUnionParam{}
	m, err = client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if m.StopReason != anthropic.StopReasonEndTurn || m.Content[0].Text != "[r1] lorem ipsum dolor" {
		t.Fatalf("after the tool result %s", m.RawJSON())
	}

	// Errors, as the SDK types them.
	for _, tc := range []struct {
		name   string
		client anthropic.Client
		params anthropic.MessageNewParams
		opts   []aoption.RequestOption
		status int
		typ    string
	}{
		{"wrong key", anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("sk-wrong"), aoption.WithMaxRetries(0)), params, nil, 401, "authentication_error"},
		{"other model", client, anthropic.MessageNewParams{Model: "claude-nope", MaxTokens: 10, Messages: params.Messages[:1]}, nil, 404, "not_found_error"},
		{"no messages", client, anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 10}, nil, 400, "invalid_request_error"},
		{"overloaded", client, params, []aoption.RequestOption{aoption.WithHeader("X-Sim-Status", "529")}, 529, "overloaded_error"},
		{"rate limited", client, params, []aoption.RequestOption{aoption.WithHeader("X-Sim-Status", "429")}, 429, "rate_limit_error"},
	} {
		_, err := tc.client.Messages.New(ctx, tc.params, tc.opts...)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.typ || apiErr.Message == "" ||
			!strings.HasPrefix(apiErr.RequestID, "req_") {
			t.Errorf("%s: %v, want %d %s", tc.name, err, tc.status, tc.typ)
		}
	}
	// A stream refused before it starts is an error of the stream.
	stream = client.Messages.NewStreaming(ctx, params, aoption.WithHeader("X-Sim-Status", "529"))
	for stream.Next() {
	}
	var apiErr *anthropic.Error
	if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || string(apiErr.Type()) != "overloaded_error" {
		t.Errorf("refused stream: %v", err)
	}
	stream.Close()
}
