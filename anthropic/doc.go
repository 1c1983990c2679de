// Package anthropic translates between the Anthropic Messages API and the
// OpenAI chat-completions API, so a client speaking Messages can be served by
// a pool that speaks chat completions (vLLM, say):
//
//   - ToChat turns a Messages request body into a chat-completions request
//     body as vLLM takes it; ToChatAsks also says what the request asks
//     that not every chat-completions pool serves as asked (Asks:
//     thinking, top_k, a prefill, stop sequences, server tools), and
//     Asks.Check refuses it, naming the field, for a pool that cannot;
//   - FromChat turns a (non-streamed) chat completion into a Messages
//     response;
//   - Stream turns a chat-completions SSE stream into Messages SSE events,
//     one upstream chunk at a time, holding only the state of the open
//     content block;
//   - Error is Anthropic's error shape, and FromOpenAIError maps an upstream
//     OpenAI- or vLLM-shaped error onto it.
//
// The other way round, for a client speaking chat completions served by a
// pool that speaks Messages (api.anthropic.com or a compatible server):
//
//   - ChatToMessages turns a chat-completions request body into a Messages
//     request body, refusing with a 400 naming the field what Messages
//     cannot express, or, for a pool that opts in, dropping the sampling
//     settings among them;
//   - MessagesToChat turns a (non-streamed) Messages response into a chat
//     completion;
//   - ChatStream turns a Messages SSE stream into chat-completions chunks,
//     one upstream event at a time, ending in [DONE] or, through Fail, in
//     an error chunk as vLLM sends one;
//   - FromAnthropicError maps an upstream Messages error onto OpenAI's
//     error body.
//
// What is said below of the first four holds for these too (a ChatStream,
// like a Stream, belongs to one response); MessagesToChat and NewChatStream
// also read the clock, for the created field Messages lacks.
//
// Unlike package openai, translation decodes the whole body: every field has
// to be rewritten, so there is nothing to gain from locating spans. Requests
// and stream chunks are read with the gateway's JSON scanner
// (internal/jsonscan, with this package's readers on it in scan.go), which
// accepts exactly what encoding/json accepts (jsonscan's FuzzScanner) at
// several times its speed; the rare paths (responses, upstream errors) use encoding/json.
// Output is appended by hand rather than marshalled, which keeps it fast and
// the key order fixed.
//
// ToChat, FromChat and FromOpenAIError are pure functions of their inputs and
// safe for concurrent use. A Stream belongs to one response and must not be
// shared between goroutines. The package starts no goroutines. Input is
// hostile: anything malformed is an error, never a panic.
package anthropic
