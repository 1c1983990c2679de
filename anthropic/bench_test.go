package anthropic

import (
	"strings"
	"testing"
)

// typicalRequest is a ~1 KB Messages request: a system prompt, a short
// conversation with one tool round trip, and a tool definition.
const typicalRequest = `{"model":"claude-sonnet-4","max_tokens":1024,"temperature":0.7,"stream":true,
"system":"You are a helpful assistant for an online bookshop. Answer briefly and cite the catalogue when you can.",
"tools":[{"name":"search_catalogue","description":"Search the catalogue by title, author or subject.","input_schema":{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer"}},"required":["query"]}}],
"messages":[
{"role":"user","content":"Do you have anything by Ursula K. Le Guin about anarchist societies? I read The Dispossessed years ago."},
{"role":"assistant","content":[{"type":"text","text":"Let me look that up."},{"type":"tool_use","id":"toolu_01","name":"search_catalogue","input":{"query":"Le Guin anarchism","limit":3}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"1. The Dispossessed (1974), paperback, in stock. 2. The Day Before the Revolution (short story, in The Wind's Twelve Quarters), in stock. 3. Always Coming Home (1985), out of print."},{"type":"text","text":"Which of those would you recommend after The Dispossessed?"}]}
]}`

func bigRequest() []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","max_tokens":512,"system":"Summarise the document.","messages":[`)
	para := strings.Repeat("The quick brown fox jumps over the lazy dog, \"quoted\" and\tescaped.\n", 16)
	for i := 0; sb.Len() < 128<<10; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		sb.WriteString(`{"role":"` + role + `","content":[{"type":"text","text":` + quote(para) + `}]}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

func quote(s string) string { return string(appendString(nil, s)) }

func BenchmarkToChat(b *testing.B) {
	for _, bc := range []struct {
		name string
		body []byte
	}{{"typical", []byte(typicalRequest)}, {"128KB", bigRequest()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, e := ToChat(bc.body, "pool-model"); e != nil {
					b.Fatal(e.Message)
				}
			}
		})
	}
}

const typicalResponse = `{"id":"chatcmpl-abc123","object":"chat.completion","created":1733000000,"model":"pool-model","choices":[{"index":0,"message":{"role":"assistant","content":"After The Dispossessed, try The Day Before the Revolution: it is a short prequel about Odo, the founder of the anarchist society.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"search_catalogue","arguments":"{\"query\": \"Le Guin short stories\", \"limit\": 5}"}}]},"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":312,"completion_tokens":48,"total_tokens":360}}`

func BenchmarkFromChat(b *testing.B) {
	body := []byte(typicalResponse)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, e := FromChat(body, "claude-sonnet-4"); e != nil {
			b.Fatal(e.Message)
		}
	}
}

// BenchmarkStreamChunk measures one typical text-delta chunk, the bulk of
// any stream.
func BenchmarkStreamChunk(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1733000000,"model":"pool-model","choices":[{"index":0,"delta":{"content":" the founder"},"logprobs":null,"finish_reason":null}]}`)
	s := NewStream("claude-sonnet-4")
	dst := make([]byte, 0, 4096)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = s.Chunk(chunk, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
