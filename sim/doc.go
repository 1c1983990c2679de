// Package sim is a simulator of a vLLM server's OpenAI-compatible API and,
// as an alternative, of Anthropic's Messages API.
//
// It backs the gateway's quickstart (`triage sim --listen ADDR --model NAME`),
// its integration tests and its benchmarks. A [Server] is an [http.Handler]
// that answers like vLLM's OpenAI server on the wire:
//
//   - POST /v1/chat/completions and POST /v1/completions, as a single JSON
//     object or as a server-sent event stream (role chunk, content chunks,
//     finish chunk, then, when stream_options.include_usage asks, the usage
//     chunk with "choices":[], then "data: [DONE]"),
//   - POST /v1/embeddings (deterministic, L2-normalised vectors),
//   - POST /v1/responses, GET and DELETE /v1/responses/{id} (below),
//   - GET /v1/models and GET /health,
//   - vLLM's error shape {"object":"error","message":...,"type":...,
//     "param":null,"code":N} for every error it answers (param names the
//     parameter at fault where vLLM names one).
//
// With [Options.API] "anthropic" it serves api.anthropic.com's POST
// /v1/messages and GET /v1/models instead of the OpenAI endpoints (below).
//
// # Tool calls
//
// A chat request with a non-empty "tools" array, whose tool_choice is not
// "none" (vLLM's default is "auto" when tools are given) and whose last
// message is not a "tool" message, is answered with a call instead of text,
// as vLLM with automatic tool choice enabled: to the function tool_choice
// names, else to the first tool. The message has "content":null and one
// entry in tool_calls, {"id":"chatcmpl-tool-…","type":"function",
// "function":{"name":…,"arguments":…}}; finish_reason is "tool_calls". The
// arguments are a JSON object built from the function's parameters schema:
// each required property (each property when none is required), in the
// schema's order, with its first enum value, its const, or a value of its
// type: "sim" for a string, 1 for a number or an integer, true for a
// boolean, [] for an array, {} for an object. Streamed, the role chunk is
// followed by a chunk whose delta is tool_calls [{"id":…,"type":"function",
// "index":0,"function":{"name":…,"arguments":""}}], then by the arguments in
// up to Chunks fragments ({"index":0,"function":{"arguments":…}}), each a
// content chunk for the chunk delay and for drops, then the finish chunk.
// The fragments are the completion tokens. Tools are validated as vLLM
// does: a tool without a function name, a tool_choice without tools, an
// unknown tool_choice or one naming no tool is a 400.
//
// # Stop strings
//
// A chat request's "stop" (a string or an array of strings) cuts an answer
// that is not streamed before the earliest stop string its text holds, as
// vLLM does: finish_reason "stop", the string named in the choice's
// stop_reason (null otherwise), and the completion tokens those of the text
// kept. Streamed answers ignore it.
//
// # Responses API
//
// POST /v1/responses takes "input" (a string, or an array of items:
// messages whose content is a string or input_text/output_text parts,
// function calls and their outputs), "instructions", "max_output_tokens",
// "previous_response_id", "store" and "stream", and answers vLLM's
// response object: {"id":"resp_…","object":"response","created_at":…,
// "status":"completed","model":…,"output":[{"type":"message","id":"msg_…",
// "role":"assistant","status":"completed","content":[{"type":"output_text",
// "text":…,"annotations":[]}]}],"usage":{"input_tokens":…,"output_tokens":…,
// "total_tokens":…,"input_tokens_details":…,"output_tokens_details":…},…}.
// When max_output_tokens is below the chunk count the text is cut there and
// the status is "incomplete" with incomplete_details {"reason":
// "max_output_tokens"}. Streamed, the events carry "event:" lines and
// numbered sequence_number fields: response.created, response.in_progress,
// response.output_item.added, response.content_part.added, one
// response.output_text.delta per word (the content events), then
// response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed with the whole response;
// there is no "[DONE]". Unless "store" is false, a response is kept once it
// has been sent whole, up to the latest 1024: GET /v1/responses/{id}
// returns it and DELETE removes it, answering {"id":…,"object":
// "response.deleted","deleted":true} as OpenAI does (vLLM has no DELETE).
// An id the replica does not hold, in those or as previous_response_id,
// gets vLLM's 404 with type "invalid_request_error" and param
// "response_id"; a previous response it holds counts its tokens in the
// input, as vLLM prepends that conversation. Ids are unique to the Server,
// so a conversation sent to another replica is a 404 there, as with vLLM.
// GET and DELETE are not POSTs: they are neither counted nor steered by
// X-Sim-* headers. Background responses are refused.
//
// # Anthropic mode
//
// With [Options.API] "anthropic", POST /v1/messages is served as
// api.anthropic.com serves it. Every response carries a request-id header
// "req_…". Before anything else, a request must carry [Options.APIKey],
// when set, in x-api-key or as "Authorization: Bearer" (where Anthropic's
// Go SDK v2 sends it), else 401 authentication_error, and an
// anthropic-version header (any version), else 400 invalid_request_error.
// The body needs model and max_tokens (>= 1) and a non-empty messages array
// alternating user and assistant from user, each content a string or
// blocks with a type; system is a string or text blocks; tools need a name
// and an object input_schema (server tools, with another type, are
// accepted and never called); tool_choice is auto, any, tool (naming a
// tool) or none. The answer is a Message {"id":"msg_…","type":"message",
// "role":"assistant","model":…,"content":[…],"stop_reason":…,
// "stop_sequence":…,"usage":{"input_tokens":…,"cache_creation_input_tokens":0,
// "cache_read_input_tokens":0,"output_tokens":…}}: a text block, cut at
// max_tokens words (stop_reason "max_tokens") and before the first of the
// stop_sequences it holds ("stop_sequence", naming it), else "end_turn"; or,
// under the tool rule above (tools given, tool_choice not none, the last
// message a user turn holding no tool_result), a tool_use block
// {"type":"tool_use","id":"toolu_…","name":…,"input":…} to the tool
// tool_choice names, else the first, with stop_reason "tool_use". Streamed:
// message_start (usage with the input tokens and output_tokens 1),
// content_block_start, ping, a content_block_delta per word (text_delta)
// or argument fragment (input_json_delta), content_block_stop,
// message_delta (stop_reason, stop_sequence, usage.output_tokens) and
// message_stop, each with its "event:" line. GET /v1/models lists the
// model in Anthropic's shape. Every error, injected ones included, has
// Anthropic's shape {"type":"error","error":{"type":…,"message":…},
// "request_id":…}: 400 invalid_request_error (and other 4xx), 401
// authentication_error, 403 permission_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 500 api_error (and other 5xx),
// 504 timeout_error, 529 overloaded_error. This is an implementation of its
// own: it shares no code with the gateway's translator, which is tested
// against it.
//
// # Controls
//
// The package owns the behaviour of one simulated replica: its latency,
// chunking, injected failures (error status before any byte, a stream
// aborted mid-way without its terminating chunk, or one of the wire-level
// faults below), its health flag, its counters ([Stats]), a copy of the
// last POST it received ([Server.LastRequest]) and, optionally, a log line
// per POST ([Options.RequestLog]). Tests and benchmarks steer single
// requests with the X-Sim-Latency, X-Sim-Chunks, X-Sim-Chunk-Delay,
// X-Sim-Status, X-Sim-Drop-After and X-Sim-Fault request headers; every
// response carries X-Sim-Replica. These apply to every POST endpoint: a
// chunk is a word of text, or a fragment of a tool call's arguments, and a
// drop cuts a stream after that many of them, whatever its event format.
//
// It does not own listening, TLS or process lifetime: the caller mounts the
// handler on its own http.Server (or httptest.Server). The one exception is
// the connections a fault keeps open (below): the Server serves those
// itself until [Server.Close].
//
// # Faults
//
// A fault, named by the X-Sim-Fault header or chosen for a fraction
// [Options.FaultRate] of requests from [Options.Fault], answers a valid POST
// request in a way no well-behaved server does, so that a client's (or a
// gateway's) handling of broken upstreams can be tested. X-Sim-Status and
// [Options.ErrorRate] are decided first; invalid requests get their 4xx
// instead of the fault. Apart from hang and die-mid-stream, a fault is
// written raw on the hijacked connection ([http.Hijacker]) after the
// latency, in a single write. "The answer" below is the response the
// request would have got, whole and framed by Content-Length (a stream's
// events all at once), in its endpoint's shape:
//
//	HTTP/1.1 200 OK\r\n
//	Content-Type: application/json\r\n     (text/event-stream; charset=utf-8 for a stream)
//	Content-Length: N\r\n
//	X-Sim-Replica: NAME\r\n
//	\r\n
//	BODY
//
// A "leaked" response is the same with a completion (a response for
// /v1/responses, never stored; a Message in Anthropic mode) whose text is
// LEAKED-NAME, a marker that must never reach any client.
//
//   - extra-response: the answer immediately followed by a leaked response.
//   - extra-crlf: the answer followed by "\r\n".
//   - no-content-body: "HTTP/1.1 204 No Content", X-Sim-Replica, then the
//     bytes LEAKED-NAME as if it had a body.
//   - short-length: a 200 whose JSON body is a completion with the text
//     "héllo wörld ✓", its Content-Length counting characters instead of
//     bytes: the last bytes of the body (4 and more) stay on the connection.
//   - late-response: the answer; then, if no request arrives on the
//     connection within 20ms, an unsolicited leaked response.
//   - switch-protocols: "HTTP/1.1 101 Switching Protocols" with
//     "Upgrade: websocket" and "Connection: Upgrade", which the request did
//     not ask for, then the answer (the connection keeps speaking HTTP/1.1).
//   - informational: "HTTP/1.1 102 Processing", then the answer.
//   - close-after-read: the connection closed (FIN) once the request is
//     read, without writing a byte.
//   - reset-after-read: the same with an RST (SO_LINGER 0, then close).
//   - garbage: "this is not http\r\n\r\n", then the connection closed.
//   - wrong-content-type: a well-formed 200 written by net/http whose
//     Content-Type is text/html and whose body is an HTML error page.
//   - bad-chunk: a 200 head with "Transfer-Encoding: chunked" followed, in
//     the same write, by the invalid chunk-size line "zz\r\n"; then the
//     connection closed.
//   - nul-header: the answer with the header "X-Bad: a\x00b" after
//     Content-Length.
//   - hang: nothing, not even after the latency, until the client goes away.
//   - die-mid-stream: a stream aborted after half its content chunks (after
//     X-Sim-Drop-After chunks when that is set), exactly as a drop: net/http
//     flushes the chunks written and closes the connection without the
//     terminating chunk. A request that does not stream is served normally
//     and not counted as a fault; [Options.FaultRate] counts only streams.
//
// extra-response, extra-crlf, no-content-body, short-length, late-response,
// switch-protocols, informational and nul-header keep the connection open
// (unless the request asked to close it) and serve the requests that follow
// on it as usual, the stray bytes included: whatever reuses that connection
// sees them first. net/http has let go of those connections, so the Server
// serves them with an http.Server of its own; [Server.Close] closes them.
// The others close it. A fault needs a hijackable connection: under HTTP/2
// or a ResponseWriter that cannot be hijacked it answers 500 instead.
//
// # Performance model
//
// With [Options.Perf] enabled (`triage sim -perf`), chat and completion
// requests are paced by a model of a vLLM replica instead of Latency and
// ChunkDelay: a KV cache of fixed capacity in blocks with prefix reuse
// (between requests with the same cache_salt, as vLLM) and
// least-recently-used eviction, prefill time proportional to the prompt
// tokens not found in the cache, a decode step per token, and a running
// batch of bounded size behind a waiting queue. GET /metrics then answers
// vLLM's vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc, vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total, and usage carries
// prompt_tokens_details.cached_tokens. [Perf] documents each parameter and
// where its default comes from (Llama-3.1-8B-Instruct in BF16 on one H100
// SXM 80 GB). A prompt whose blocks could not fit in an empty cache is a
// 400, as vLLM refuses a prompt beyond its context length. A cache_salt is
// validated as vLLM does, model or not: a non-empty string of at most 128
// characters without '@', '/', '\' or NUL, else a 400. With the model
// off (the default) the Server behaves as it always has, and /metrics is a
// 404.
//
// # Concurrency
//
// Every method of [Server] is safe for concurrent use. Counters are
// atomics; the random source (a PCG seeded from [Options.Seed], so the
// sequence of injected errors, faults and drops is deterministic given the
// seed and the order of requests), the recorded last request and the
// stored responses are guarded by mutexes. All waiting (latency, gaps between chunks, a hang) happens on
// the request's goroutine and ends early when the request context is done.
// The package starts goroutines only to serve the connections faults keep
// open: one accept loop, started with the first such fault, and net/http's
// goroutine per connection; and, with the performance model on, its
// scheduler, one goroutine per Server that sleeps for each engine step
// (the simulated GPU time) and hands tokens to the requests' goroutines
// over channels. [Server.Close] ends them all.
//
// A dropped stream is produced by panicking with [http.ErrAbortHandler]
// after the chunks already written have been flushed; net/http then closes
// the connection without logging. Callers that invoke ServeHTTP outside
// net/http's server (for example with httptest.ResponseRecorder) must not
// enable drops.
package sim
