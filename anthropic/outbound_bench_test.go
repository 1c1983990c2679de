package anthropic

// Figures from one run of
//
//	go test ./anthropic/ -run '^$' -bench '^Benchmark(ToChat|ChatToMessages|MessagesToChat|ChatStreamEvent)$' -benchmem -count 3
//
// on a 2-core Intel Xeon shared with other work (load average near 3, so
// the spread between runs is the machine's). ToChat, the inbound
// direction, is the yardstick measured at the same moment: testdata/bench.txt
// has it at 10.3 µs and 670 µs on a quieter machine.
//
//	BenchmarkToChat/typical-2              8229 ns/op  135 MB/s    3784 B/op   37 allocs/op
//	BenchmarkToChat/typical-2              8918 ns/op  125 MB/s    3784 B/op   37 allocs/op
//	BenchmarkToChat/typical-2             12369 ns/op   90 MB/s    3784 B/op   37 allocs/op
//	BenchmarkToChat/128KB-2              948441 ns/op  138 MB/s  321320 B/op  460 allocs/op
//	BenchmarkToChat/128KB-2              778811 ns/op  169 MB/s  321320 B/op  460 allocs/op
//	BenchmarkToChat/128KB-2              741997 ns/op  177 MB/s  321320 B/op  460 allocs/op
//	BenchmarkChatToMessages/typical-2      7461 ns/op  157 MB/s    3072 B/op   27 allocs/op
//	BenchmarkChatToMessages/typical-2      6298 ns/op  187 MB/s    3072 B/op   27 allocs/op
//	BenchmarkChatToMessages/typical-2      8018 ns/op  147 MB/s    3072 B/op   27 allocs/op
//	BenchmarkChatToMessages/128KB-2      270268 ns/op  486 MB/s  183072 B/op  340 allocs/op
//	BenchmarkChatToMessages/128KB-2      335854 ns/op  391 MB/s  183072 B/op  340 allocs/op
//	BenchmarkChatToMessages/128KB-2      280531 ns/op  468 MB/s  183072 B/op  340 allocs/op
//	BenchmarkMessagesToChat-2             16148 ns/op   33 MB/s    2016 B/op   26 allocs/op
//	BenchmarkMessagesToChat-2             11955 ns/op   45 MB/s    2016 B/op   26 allocs/op
//	BenchmarkMessagesToChat-2             11963 ns/op   45 MB/s    2016 B/op   26 allocs/op
//	BenchmarkChatStreamEvent/text-2         368 ns/op  250 MB/s       0 B/op    0 allocs/op
//	BenchmarkChatStreamEvent/text-2         324 ns/op  284 MB/s       0 B/op    0 allocs/op
//	BenchmarkChatStreamEvent/text-2         381 ns/op  242 MB/s       0 B/op    0 allocs/op
//	BenchmarkChatStreamEvent/input_json-2   693 ns/op  162 MB/s       0 B/op    0 allocs/op
//	BenchmarkChatStreamEvent/input_json-2   746 ns/op  150 MB/s       0 B/op    0 allocs/op
//	BenchmarkChatStreamEvent/input_json-2   630 ns/op  178 MB/s       0 B/op    0 allocs/op
//
// The targets were 10 µs for a typical request, well under 1 ms for 128 KB,
// and 1 µs an event. The 128 KB body goes at about the speed of one pass
// over its bytes: its text is carried over as the literals the client sent,
// where ToChat decodes and encodes it again. An event allocates nothing:
// the chunk head is built once, at message_start. MessagesToChat uses
// encoding/json, as FromChat does.

import (
	"strings"
	"testing"
)

// typicalChatRequest is a ~1 KB chat-completions request: a system prompt,
// a short conversation with one tool round trip, and a tool definition.
const typicalChatRequest = `{"model":"gpt-4o","max_tokens":1024,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true},
"tools":[{"type":"function","function":{"name":"search_catalogue","description":"Search the catalogue by title, author or subject.","parameters":{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer"}},"required":["query"]}}}],
"messages":[
{"role":"system","content":"You are a helpful assistant for an online bookshop. Answer briefly and cite the catalogue when you can."},
{"role":"user","content":"Do you have anything by Ursula K. Le Guin about anarchist societies? I read The Dispossessed years ago."},
{"role":"assistant","content":"Let me look that up.","tool_calls":[{"id":"call_01","type":"function","function":{"name":"search_catalogue","arguments":"{\"query\":\"Le Guin anarchism\",\"limit\":3}"}}]},
{"role":"tool","tool_call_id":"call_01","content":"1. The Dispossessed (1974), paperback, in stock. 2. The Day Before the Revolution (short story, in The Wind's Twelve Quarters), in stock. 3. Always Coming Home (1985), out of print."},
{"role":"user","content":"Which of those would you recommend after The Dispossessed?"}
]}`

// bigChatRequest is a 128 KB conversation of the same text bigRequest
// uses, escapes and all.
func bigChatRequest() []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","max_tokens":512,"messages":[{"role":"system","content":"Summarise the document."}`)
	para := strings.Repeat("The quick brown fox jumps over the lazy dog, \"quoted\" and\tescaped.\n", 16)
	for i := 0; sb.Len() < 128<<10; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		sb.WriteString(`,{"role":"` + role + `","content":[{"type":"text","text":` + quote(para) + `}]}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

func BenchmarkChatToMessages(b *testing.B) {
	for _, bc := range []struct {
		name string
		body []byte
	}{{"typical", []byte(typicalChatRequest)}, {"128KB", bigChatRequest()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, e := ChatToMessages(bc.body, "claude-sonnet-4", 4096, false); e != nil {
					b.Fatal(e.Message)
				}
			}
		})
	}
}

const typicalMessage = `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4","content":[{"type":"text","text":"After The Dispossessed, try The Day Before the Revolution: it is a short prequel about Odo, the founder of the anarchist society."},{"type":"tool_use","id":"toolu_01","name":"search_catalogue","input":{"query":"Le Guin short stories","limit":5}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":312,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":48}}`

func BenchmarkMessagesToChat(b *testing.B) {
	body := []byte(typicalMessage)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, e := MessagesToChat(body, "gpt-4o"); e != nil {
			b.Fatal(e.Message)
		}
	}
}

// BenchmarkChatStreamEvent measures one typical text delta, the bulk of
// any stream, and one tool input delta.
func BenchmarkChatStreamEvent(b *testing.B) {
	for _, bc := range []struct {
		name, start, data string
	}{
		{"text", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the founder"}}`},
		{"input_json", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"search_catalogue","input":{}}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"query\": \"Le Gu"}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewChatStream("gpt-4o", true)
			dst := make([]byte, 0, 4096)
			var err error
			dst, err = s.Event([]byte("message_start"), []byte(`{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":312,"output_tokens":1}}}`), dst)
			if err == nil {
				dst, err = s.Event([]byte("content_block_start"), []byte(bc.start), dst[:0])
			}
			if err != nil {
				b.Fatal(err)
			}
			name, data := []byte("content_block_delta"), []byte(bc.data)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = s.Event(name, data, dst[:0]); err != nil {
					b.Fatal(err)
				}
				s.args = s.args[:0] // the held arguments would grow without end
			}
		})
	}
}
