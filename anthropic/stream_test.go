package anthropic

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

type sseEvent struct {
	Name string
	Data map[string]any
}

// parseSSE checks that out is a sequence of well-formed events, each with
// one data line holding a JSON object whose type is the event's name.
func parseSSE(t *testing.T, out []byte) []sseEvent {
	t.Helper()
	var evs []sseEvent
	s := string(out)
	for s != "" {
		i := strings.Index(s, "\n\n")
		if i < 0 {
			t.Fatalf("unterminated event %q", s)
		}
		ev := s[:i]
		s = s[i+2:]
		name, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		name = strings.TrimPrefix(name, "event: ")
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event data is not a JSON object: %v: %q", err, data)
		}
		if m["type"] != name {
			t.Fatalf("event %q has data type %v", name, m["type"])
		}
		evs = append(evs, sseEvent{name, m})
	}
	return evs
}

// reassemble builds the Messages response a client would from the events.
func reassemble(t *testing.T, evs []sseEvent) map[string]any {
	t.Helper()
	msg := map[string]any{}
	var blocks []map[string]any
	var partial []string
	stopped := false
	for _, ev := range evs {
		if stopped {
			t.Fatalf("event after message_stop: %v", ev)
		}
		switch ev.Name {
		case "message_start":
			if msg["id"] != nil {
				t.Fatal("two message_start")
			}
			for k, v := range ev.Data["message"].(map[string]any) {
				msg[k] = v
			}
		case "content_block_start":
			if int(ev.Data["index"].(float64)) != len(blocks) {
				t.Fatalf("block index %v, want %d", ev.Data["index"], len(blocks))
			}
			blocks = append(blocks, ev.Data["content_block"].(map[string]any))
			partial = append(partial, "")
		case "content_block_delta":
			i := int(ev.Data["index"].(float64))
			d := ev.Data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + d["text"].(string)
			case "input_json_delta":
				partial[i] += d["partial_json"].(string)
			default:
				t.Fatalf("delta %v", d)
			}
		case "content_block_stop":
			i := int(ev.Data["index"].(float64))
			if blocks[i]["type"] == "tool_use" && partial[i] != "" {
				var in any
				if err := json.Unmarshal([]byte(partial[i]), &in); err != nil {
					t.Fatalf("partial_json %q: %v", partial[i], err)
				}
				blocks[i]["input"] = in
			}
		case "message_delta":
			for k, v := range ev.Data["delta"].(map[string]any) {
				msg[k] = v
			}
			msg["usage"] = ev.Data["usage"]
		case "message_stop":
			stopped = true
		}
	}
	if !stopped {
		t.Fatal("no message_stop")
	}
	content := make([]any, len(blocks))
	for i, b := range blocks {
		content[i] = b
	}
	msg["content"] = content
	return msg
}

// split cuts s into random pieces on rune boundaries (each upstream chunk
// is JSON, so a piece is always whole characters).
func split(r *rand.Rand, s string) []string {
	var out []string
	rs := []rune(s)
	for len(rs) > 0 {
		n := 1 + r.Intn(len(rs))
		if r.Intn(2) == 0 {
			n = len(rs)
		}
		out = append(out, string(rs[:n]))
		rs = rs[n:]
	}
	return out
}

func chunkJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestStreamMatchesFromChat(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for iter := 0; iter < 300; iter++ {
		text := []string{"Hello", ", wor\"ld\n", "", "😀 done."}[r.Intn(4)]
		args := []string{`{"city": "Paris", "days": [1, 2]}`, `{"q":"a\"b"}`, `{}`}
		nTools := r.Intn(3)
		usageAfter := r.Intn(2) == 0
		var chunks [][]byte
		delta := func(d map[string]any) []byte {
			return chunkJSON(map[string]any{"id": "chatcmpl-7", "object": "chat.completion.chunk", "model": "pool",
				"choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": nil}}})
		}
		chunks = append(chunks, delta(map[string]any{"role": "assistant", "content": ""}))
		for _, p := range split(r, text) {
			chunks = append(chunks, delta(map[string]any{"content": p}))
		}
		var calls []any
		for i := 0; i < nTools; i++ {
			a := args[r.Intn(len(args))]
			id, name := "call_"+string(rune('a'+i)), "tool"+string(rune('0'+i))
			calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": a}})
			first := true
			for _, p := range append(split(r, a), "") {
				if p == "" && !first {
					break
				}
				tc := map[string]any{"index": i, "function": map[string]any{"arguments": p}}
				if first {
					tc["id"], tc["type"] = id, "function"
					tc["function"].(map[string]any)["name"] = name
					first = false
				}
				chunks = append(chunks, delta(map[string]any{"tool_calls": []any{tc}}))
			}
		}
		finish := "stop"
		if nTools > 0 {
			finish = "tool_calls"
		}
		usage := map[string]any{"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33}
		fin := map[string]any{"id": "chatcmpl-7", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}}
		if usageAfter {
			chunks = append(chunks, chunkJSON(fin), chunkJSON(map[string]any{"id": "chatcmpl-7", "choices": []any{}, "usage": usage}))
		} else {
			fin["usage"] = usage
			chunks = append(chunks, chunkJSON(fin))
		}
		chunks = append(chunks, []byte("[DONE]"))

		s := NewStream("claude")
		var out []byte
		for _, c := range chunks {
			var err error
			if out, err = s.Chunk(c, out); err != nil {
				t.Fatalf("chunk %s: %v", c, err)
			}
		}
		got := reassemble(t, parseSSE(t, out))

		msgObj := map[string]any{"role": "assistant", "content": text}
		if calls != nil {
			msgObj["tool_calls"] = calls
		}
		whole := chunkJSON(map[string]any{"id": "chatcmpl-7", "model": "pool", "usage": usage,
			"choices": []any{map[string]any{"index": 0, "message": msgObj, "finish_reason": finish}}})
		resp, e := FromChat(whole, "claude")
		if e != nil {
			t.Fatal(e.Message)
		}
		var want map[string]any
		_ = json.Unmarshal(resp, &want)
		// Streams report input tokens only at the end; compare the final
		// counts, as a client totals them.
		if !reflect.DeepEqual(got["content"], want["content"]) ||
			got["stop_reason"] != want["stop_reason"] || got["id"] != want["id"] ||
			!reflect.DeepEqual(got["usage"], want["usage"]) || got["model"] != want["model"] {
			t.Fatalf("stream gave %v\nFromChat gave %v\nevents:\n%s", got, want, out)
		}
	}
}

func TestStreamStopSequenceAndEmpty(t *testing.T) {
	s := NewStream("m")
	out, _ := s.Chunk([]byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop","stop_reason":"END"}]}`), nil)
	out, _ = s.Chunk([]byte("[DONE]"), out)
	got := reassemble(t, parseSSE(t, out))
	if got["stop_reason"] != "stop_sequence" || got["stop_sequence"] != "END" {
		t.Fatalf("%v", got)
	}

	// An upstream that sends nothing but [DONE] still yields a whole
	// message.
	out, err := NewStream("m").Chunk([]byte("[DONE]"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got = reassemble(t, parseSSE(t, out))
	if got["stop_reason"] != "end_turn" || len(got["content"].([]any)) != 0 {
		t.Fatalf("%v", got)
	}
}

func TestStreamEventOrder(t *testing.T) {
	s := NewStream("m")
	var out []byte
	for _, c := range []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}`,
		`[DONE]`,
	} {
		var err error
		if out, err = s.Chunk([]byte(c), out); err != nil {
			t.Fatal(err)
		}
	}
	want := "" +
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_c\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\":1}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":5,\"output_tokens\":6}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestStreamErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"not JSON", []string{`{"id":`}, "not valid JSON"},
		{"trailing bytes", []string{`{"id":"c"} x`}, "not valid JSON"},
		{"wrong type", []string{`{"id":"c","choices":[{"index":"0"}]}`}, "not valid JSON"},
		{"upstream error chunk", []string{`{"error":{"message":"oom","type":"server_error"}}`}, "oom"},
		{"vllm error chunk", []string{`{"object":"error","error":{"message":"oom"}}`}, "oom"},
		{"bad tool arguments at finish", []string{
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{\"a\":"}}]}}]}`,
			`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`}, "not a JSON object"},
		{"bad tool arguments at next call", []string{
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"nope"}}]}}]}`,
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"u","function":{"name":"g","arguments":"{}"}}]}}]}`}, "not a JSON object"},
		{"bad tool arguments at DONE", []string{
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"[1]"}}]}}]}`,
			`[DONE]`}, "not a JSON object"},
		{"data after DONE", []string{`[DONE]`, `{}`}, "after [DONE]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream("m")
			var out []byte
			var err error
			for _, c := range tc.chunks {
				if out, err = s.Chunk([]byte(c), out); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			out = s.Fail(out, err.Error())
			evs := parseSSE(t, out)
			last := evs[len(evs)-1]
			if last.Name != "error" || last.Data["error"].(map[string]any)["type"] != TypeAPI {
				t.Fatalf("last event %v", last)
			}
		})
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}`), []byte(`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`), []byte("[DONE]"))
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":3,"function":{"arguments":"{\"a\":"}}]}}]}`), []byte(`{"choices":[{"delta":{"tool_calls":[{"index":3,"function":{"arguments":"\"\u2028\"}"}}]}}]}`), []byte("[DONE]"))
	f.Add([]byte("\xff"), []byte(`{"error":"x"}`), []byte(`[DONE]`))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		s := NewStream("m\x00\"")
		var out []byte
		for _, chunk := range [][]byte{a, b, c, []byte("[DONE]")} {
			var err error
			out, err = s.Chunk(chunk, out)
			if err == nil && string(bytes.TrimSpace(chunk)) != "[DONE]" && !json.Valid(chunk) {
				t.Fatalf("chunk %q is not JSON but was accepted", chunk)
			}
			if err != nil {
				out = s.Fail(out, err.Error())
				break
			}
		}
		for _, ev := range parseSSE(t, out) {
			_ = ev
		}
		if !bytes.HasSuffix(out, []byte("\n\n")) {
			t.Fatalf("output does not end an event: %q", out)
		}
	})
}
