package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// namedEvent is a server-sent event with its "event:" line.
type namedEvent struct {
	name, data string
}

// readNamedEvents reads "event: NAME\ndata: JSON\n\n" events until EOF or
// error.
func readNamedEvents(r io.Reader) ([]namedEvent, error) {
	br := bufio.NewReader(r)
	var events []namedEvent
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return events, nil
		}
		if err != nil {
			return events, io.ErrUnexpectedEOF
		}
		name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "event: ")
		if !ok {
			return events, errors.New("event without event line: " + line)
		}
		data, err := readEvent(br)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return events, err
		}
		events = append(events, namedEvent{name, data})
	}
}

type responseOut struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Model              string          `json:"model"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	IncompleteDetails  json.RawMessage `json:"incomplete_details"`
	MaxOutputTokens    int             `json:"max_output_tokens"`
	Output             []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Role    string `json:"role"`
		Status  string `json:"status"`
		Content []struct {
			Type        string            `json:"type"`
			Text        string            `json:"text"`
			Annotations []json.RawMessage `json:"annotations"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokensDetails struct {
			ReasoningTokens *int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
}

// text is the response's text, checking it is one completed message.
func (r responseOut) text(t *testing.T) string {
	t.Helper()
	if len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" || r.Output[0].Status != "completed" ||
		!strings.HasPrefix(r.Output[0].ID, "msg_") || len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Type != "output_text" ||
		r.Output[0].Content[0].Annotations == nil {
		t.Fatalf("output %+v, want one completed assistant message with one output_text", r.Output)
	}
	return r.Output[0].Content[0].Text
}

func createResponse(t *testing.T, url, body string) (responseOut, []byte) {
	t.Helper()
	resp := post(t, context.Background(), url+"/v1/responses", body, nil)
	b := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out responseOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out, b
}

func do(t *testing.T, method, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// checkResponseNotFound checks vLLM's answer to an unknown response id.
func checkResponseNotFound(t *testing.T, resp *http.Response, id string) {
	t.Helper()
	b := readAll(t, resp)
	want := fmt.Sprintf(`{"object":"error","message":"Response with id '%s' not found.","type":"invalid_request_error","param":"response_id","code":404}`, id)
	if resp.StatusCode != 404 || string(b) != want {
		t.Fatalf("%d %s, want 404 %s", resp.StatusCode, b, want)
	}
}

func TestResponsesCreate(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		text       string
		status     string
		inputToks  int
		outputToks int
	}{
		{"string input", `{"model":"test-model","input":"hello there world"}`, "[r1] lorem ipsum dolor sit", "completed", 3, 5},
		{"instructions", `{"input":"hello","instructions":"be very brief"}`, "[r1] lorem ipsum dolor sit", "completed", 4, 5},
		{"items", `{"input":[{"role":"system","content":"be brief"},{"type":"message","role":"user","content":[{"type":"input_text","text":"one two"},{"type":"input_text","text":"three"}]},
			{"role":"assistant","content":[{"type":"output_text","text":"four"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c","output":"five six"}]}`, "[r1] lorem ipsum dolor sit", "completed", 9, 5},
		{"max_output_tokens", `{"input":"x","max_output_tokens":2}`, "[r1] lorem", "incomplete", 1, 2},
		{"max_output_tokens above the chunks", `{"input":"x","max_output_tokens":50}`, "[r1] lorem ipsum dolor sit", "completed", 1, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newSim(t, Options{Name: "r1", Chunks: 5})
			out, raw := createResponse(t, ts.URL, tc.body)
			if !strings.HasPrefix(out.ID, "resp_") || out.Object != "response" || out.Status != tc.status || out.Model != testModel || out.PreviousResponseID != nil {
				t.Errorf("response %s", raw)
			}
			if d := time.Since(time.Unix(out.CreatedAt, 0)); d < -time.Minute || d > time.Minute {
				t.Errorf("created_at %d is not now", out.CreatedAt)
			}
			if got := out.text(t); got != tc.text {
				t.Errorf("text %q, want %q", got, tc.text)
			}
			u := out.Usage
			if u == nil || u.InputTokens != tc.inputToks || u.OutputTokens != tc.outputToks || u.TotalTokens != tc.inputToks+tc.outputToks ||
				u.InputTokensDetails.CachedTokens == nil || u.OutputTokensDetails.ReasoningTokens == nil {
				t.Errorf("usage in %s, want %d in, %d out", raw, tc.inputToks, tc.outputToks)
			}
			if tc.status == "incomplete" {
				if string(out.IncompleteDetails) != `{"reason":"max_output_tokens"}` || out.MaxOutputTokens != 2 {
					t.Errorf("incomplete response %s", raw)
				}
			} else if string(out.IncompleteDetails) != "null" {
				t.Errorf("incomplete_details in %s", raw)
			}
			if st := s.Stats(); st != (Stats{Requests: 1, Completed: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestResponsesStore: a stored response can be got and deleted; store
// false keeps nothing; unknown ids are vLLM's 404.
func TestResponsesStore(t *testing.T) {
	s, ts := newSim(t, Options{Chunks: 3})
	out, raw := createResponse(t, ts.URL, `{"input":"hi","metadata":{"k":"v"}}`)
	for _, method := range []string{"GET", "HEAD"} {
		resp := do(t, method, ts.URL+"/v1/responses/"+out.ID)
		b := readAll(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("X-Sim-Replica") != testModel {
			t.Fatalf("%s: %d %s", method, resp.StatusCode, b)
		}
		if method == "GET" && !bytes.Equal(b, raw) {
			t.Errorf("GET %s\nwant the created response %s", b, raw)
		}
	}
	resp := do(t, "DELETE", ts.URL+"/v1/responses/"+out.ID)
	if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != `{"id":"`+out.ID+`","object":"response.deleted","deleted":true}` {
		t.Errorf("DELETE: %d %s", resp.StatusCode, b)
	}
	checkResponseNotFound(t, do(t, "GET", ts.URL+"/v1/responses/"+out.ID), out.ID)
	checkResponseNotFound(t, do(t, "DELETE", ts.URL+"/v1/responses/"+out.ID), out.ID)
	checkResponseNotFound(t, do(t, "GET", ts.URL+"/v1/responses/resp_nope"), "resp_nope")

	out, _ = createResponse(t, ts.URL, `{"input":"hi","store":false}`)
	checkResponseNotFound(t, do(t, "GET", ts.URL+"/v1/responses/"+out.ID), out.ID)

	resp = do(t, "PUT", ts.URL+"/v1/responses/"+out.ID)
	checkAPIError(t, resp, 405, "MethodNotAllowedError", "Method Not Allowed")
	resp = do(t, "GET", ts.URL+"/v1/responses/a/b")
	checkAPIError(t, resp, 404, "NotFoundError", "Not Found")
	resp = do(t, "GET", ts.URL+"/v1/responses")
	checkAPIError(t, resp, 405, "MethodNotAllowedError", "Method Not Allowed")
	// GETs and DELETEs are not counted.
	if st := s.Stats(); st != (Stats{Requests: 2, Completed: 2}) {
		t.Errorf("stats %+v", st)
	}
}

func TestResponsesStoreBound(t *testing.T) {
	var st responseStore
	for i := range maxStoredResponses + 10 {
		st.put(&responseObject{ID: fmt.Sprint(i)})
	}
	if len(st.byID) != maxStoredResponses || st.get("9") != nil || st.get("10") == nil || st.get(fmt.Sprint(maxStoredResponses+9)) == nil {
		t.Fatalf("%d stored; want the oldest 10 evicted", len(st.byID))
	}
	// Deleted ids do not pile up.
	for i := range 10 * maxStoredResponses {
		st.put(&responseObject{ID: fmt.Sprint("d", i)})
		st.delete(fmt.Sprint("d", i))
	}
	if len(st.order) > 2*maxStoredResponses || len(st.byID) != maxStoredResponses-1 {
		t.Errorf("%d stored, %d ids in order", len(st.byID), len(st.order))
	}
}

func TestResponsesPrevious(t *testing.T) {
	s, ts := newSim(t, Options{Chunks: 4})
	first, _ := createResponse(t, ts.URL, `{"input":"one two three"}`)
	second, raw := createResponse(t, ts.URL, `{"input":"four","previous_response_id":"`+first.ID+`"}`)
	if second.PreviousResponseID == nil || *second.PreviousResponseID != first.ID || second.ID == first.ID {
		t.Errorf("second response %s", raw)
	}
	// The previous conversation (3 in + 4 out) comes before the input.
	if second.Usage.InputTokens != 3+4+1 {
		t.Errorf("input tokens %d, want 8", second.Usage.InputTokens)
	}

	resp := post(t, context.Background(), ts.URL+"/v1/responses", `{"input":"x","previous_response_id":"resp_gone"}`, nil)
	checkResponseNotFound(t, resp, "resp_gone")
	if st := s.Stats(); st != (Stats{Requests: 3, Completed: 2}) {
		t.Errorf("stats %+v", st)
	}

	// Another replica does not hold the first one's responses.
	_, other := newSim(t, Options{})
	resp = post(t, context.Background(), other.URL+"/v1/responses", `{"input":"x","previous_response_id":"`+first.ID+`"}`, nil)
	checkResponseNotFound(t, resp, first.ID)
}

func TestResponsesStream(t *testing.T) {
	s, ts := newSim(t, Options{Name: "r1", Chunks: 3})
	resp := post(t, context.Background(), ts.URL+"/v1/responses", `{"input":"hi you","stream":true,"instructions":"brief"}`, nil)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	events, err := readNamedEvents(resp.Body)
	if err != nil {
		t.Fatalf("%v after %q", err, events)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %q", len(events), len(want), events)
	}
	var text strings.Builder
	var itemID string
	for i, ev := range events {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatalf("event %d %s: %v", i, ev.data, err)
		}
		if ev.name != want[i] || string(m["type"]) != `"`+want[i]+`"` || string(m["sequence_number"]) != fmt.Sprint(i) {
			t.Errorf("event %d: %s %s, want %s with sequence_number %d", i, ev.name, ev.data, want[i], i)
		}
		if id, ok := m["item_id"]; ok && string(id) != itemID {
			t.Errorf("event %d item_id %s, want %s", i, id, itemID)
		}
		switch ev.name {
		case "response.created", "response.in_progress":
			var r responseOut
			_ = json.Unmarshal(m["response"], &r)
			if r.Status != "in_progress" || len(r.Output) != 0 || r.Usage != nil || r.Instructions == nil || *r.Instructions != "brief" {
				t.Errorf("event %d response %s", i, m["response"])
			}
		case "response.output_item.added":
			var item struct{ ID, Status string }
			_ = json.Unmarshal(m["item"], &item)
			if !strings.HasPrefix(item.ID, "msg_") || item.Status != "in_progress" || !strings.Contains(string(m["item"]), `"content":[]`) {
				t.Errorf("item added %s", ev.data)
			}
			itemID = `"` + item.ID + `"`
		case "response.output_text.delta":
			var d string
			_ = json.Unmarshal(m["delta"], &d)
			text.WriteString(d)
		case "response.output_text.done":
			if string(m["text"]) != `"[r1] lorem ipsum"` {
				t.Errorf("text done %s", ev.data)
			}
		case "response.completed":
			var r responseOut
			_ = json.Unmarshal(m["response"], &r)
			if r.Status != "completed" || r.text(t) != "[r1] lorem ipsum" || r.Output[0].ID != strings.Trim(itemID, `"`) ||
				r.Usage == nil || r.Usage.InputTokens != 3 || r.Usage.OutputTokens != 3 {
				t.Errorf("completed %s", ev.data)
			}
			// Stored once completed.
			got := do(t, "GET", ts.URL+"/v1/responses/"+r.ID)
			if b := readAll(t, got); got.StatusCode != 200 || string(b) != string(m["response"]) {
				t.Errorf("GET after the stream: %d %s\nwant %s", got.StatusCode, b, m["response"])
			}
		}
	}
	if text.String() != "[r1] lorem ipsum" {
		t.Errorf("deltas %q", text.String())
	}
	waitStats(t, s, func(st Stats) bool { return st == Stats{Requests: 1, Completed: 1} })

	// A dropped stream is cut among its deltas and not stored.
	resp = post(t, context.Background(), ts.URL+"/v1/responses", `{"input":"x","stream":true}`, map[string]string{"X-Sim-Drop-After": "1"})
	defer resp.Body.Close()
	events, err = readNamedEvents(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 5 || events[4].name != "response.output_text.delta" {
		t.Fatalf("dropped stream: %q (%v), want 4 events and one delta", events, err)
	}
	var created struct{ Response responseOut }
	_ = json.Unmarshal([]byte(events[0].data), &created)
	checkResponseNotFound(t, do(t, "GET", ts.URL+"/v1/responses/"+created.Response.ID), created.Response.ID)
	waitStats(t, s, func(st Stats) bool { return st == Stats{Requests: 2, Completed: 1, Dropped: 1} })
}

func TestResponsesErrors(t *testing.T) {
	tests := []struct {
		name, body string
		hdr        map[string]string
		status     int
		typ, msg   string
	}{
		{"no input", `{"model":"test-model"}`, nil, 400, "BadRequestError", "input"},
		{"input not text", `{"input":5}`, nil, 400, "BadRequestError", "input"},
		{"bad role", `{"input":[{"role":"robot","content":"x"}]}`, nil, 400, "BadRequestError", "input.0.role"},
		{"bad item", `{"input":[{"type":"computer_call"}]}`, nil, 400, "BadRequestError", "input.0"},
		{"bad part", `{"input":[{"role":"user","content":[{"type":"video","text":"x"}]}]}`, nil, 400, "BadRequestError", "input.0.content"},
		{"background", `{"input":"x","background":true}`, nil, 400, "BadRequestError", "background"},
		{"background without store", `{"input":"x","background":true,"store":false}`, nil, 400, "BadRequestError", "background can only be used when `store` is true"},
		{"max_output_tokens", `{"input":"x","max_output_tokens":0}`, nil, 400, "BadRequestError", "max_output_tokens"},
		{"other model", `{"model":"other","input":"x"}`, nil, 404, "NotFoundError", "The model `other` does not exist."},
		{"X-Sim-Status", `{"input":"x"}`, map[string]string{"X-Sim-Status": "503"}, 503, "ServiceUnavailableError", "X-Sim-Status"},
		{"malformed", `{"input":`, nil, 400, "BadRequestError", "invalid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ts := newSim(t, Options{})
			checkAPIError(t, post(t, context.Background(), ts.URL+"/v1/responses", tc.body, tc.hdr), tc.status, tc.typ, tc.msg)
		})
	}
}

// TestResponsesFault: faults that send the answer send a response, and the
// leaked one is a response too.
func TestResponsesFault(t *testing.T) {
	_, ts := newSim(t, Options{Name: "r1", Chunks: 3})
	c := dialRaw(t, ts)
	if _, err := io.WriteString(c, rawPost("/v1/responses", `{"input":"x"}`, "X-Sim-Fault: extra-response")); err != nil {
		t.Fatal(err)
	}
	wire, _, _ := readWire(t, c, 300*time.Millisecond)
	_, body, rest := cutResponse(t, wire)
	var answer responseOut
	if err := json.Unmarshal(body, &answer); err != nil || answer.text(t) != "[r1] lorem ipsum" {
		t.Fatalf("answer %s (%v)", body, err)
	}
	_, leaked, _ := cutResponse(t, rest)
	var l responseOut
	if err := json.Unmarshal(leaked, &l); err != nil || l.Object != "response" || l.text(t) != "LEAKED-r1" {
		t.Fatalf("leaked %s (%v)", leaked, err)
	}
	checkResponseNotFound(t, do(t, "GET", ts.URL+"/v1/responses/"+l.ID), l.ID)
}

// TestResponsesSDK drives the Responses endpoints with the OpenAI Go SDK:
// create, stream, retrieve, delete, previous_response_id.
func TestResponsesSDK(t *testing.T) {
	_, ts := newSim(t, Options{Name: "r1", Chunks: 4})
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx := context.Background()

	r, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        testModel,
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there")},
		Instructions: openai.String("be brief"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusCompleted || r.OutputText() != "[r1] lorem ipsum dolor" || r.Usage.InputTokens != 4 || r.Usage.OutputTokens != 4 ||
		r.Instructions.OfString != "be brief" || r.Model != testModel {
		t.Fatalf("response %s", r.RawJSON())
	}

	got, err := client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != r.ID || got.OutputText() != r.OutputText() {
		t.Fatalf("Get: %v %+v", err, got)
	}

	next, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              testModel,
		Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("and then?", responses.EasyInputMessageRoleUser)}},
		PreviousResponseID: openai.String(r.ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.PreviousResponseID != r.ID || next.Usage.InputTokens != 8+2 {
		t.Errorf("follow-up %s", next.RawJSON())
	}

	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream it")},
	})
	var text strings.Builder
	var completed *responses.Response
	seq := int64(0)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Errorf("event %s has sequence_number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		switch e := ev.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			text.WriteString(e.Delta)
		case responses.ResponseCompletedEvent:
			completed = &e.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if text.String() != "[r1] lorem ipsum dolor" || completed == nil || completed.OutputText() != text.String() || completed.Usage.OutputTokens != 4 {
		t.Fatalf("stream: text %q, completed %+v", text.String(), completed)
	}
	if got, err := client.Responses.Get(ctx, completed.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != text.String() {
		t.Fatalf("Get of the streamed response: %v", err)
	}

	if err := client.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	var apiErr *openai.Error
	if _, err := client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := client.Responses.Delete(ctx, r.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("Delete twice: %v", err)
	}
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              testModel,
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("x")},
		PreviousResponseID: openai.String(r.ID),
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("previous_response_id of a deleted response: %v", err)
	}
}
