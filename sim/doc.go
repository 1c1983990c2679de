// Package sim is an OpenAI-compatible simulator of a vLLM server.
//
// It backs the gateway's quickstart (`triage sim --listen ADDR --model NAME`),
// its integration tests and its benchmarks. A [Server] is an [http.Handler]
// that answers like vLLM's OpenAI server on the wire:
//
//   - POST /v1/chat/completions and POST /v1/completions, as a single JSON
//     object or as a server-sent event stream (role chunk, content chunks,
//     finish chunk, usage chunk with "choices":[], then "data: [DONE]"),
//   - POST /v1/embeddings (deterministic, L2-normalised vectors),
//   - GET /v1/models and GET /health,
//   - vLLM's error shape {"object":"error","message":...,"type":...,
//     "param":null,"code":N} for every error it answers.
//
// The package owns the behaviour of one simulated replica: its latency,
// chunking, injected failures (error status before any byte, or a stream
// aborted mid-way without its terminating chunk), its health flag, its
// counters ([Stats]) and a copy of the last POST it received
// ([Server.LastRequest]). Tests and benchmarks steer single requests with
// the X-Sim-Latency, X-Sim-Chunks, X-Sim-Chunk-Delay, X-Sim-Status and
// X-Sim-Drop-After request headers; every response carries X-Sim-Replica.
//
// It does not own listening, TLS or process lifetime: the caller mounts the
// handler on its own http.Server (or httptest.Server).
//
// Concurrency: every method of [Server] is safe for concurrent use. Counters
// are atomics; the random source (a PCG seeded from [Options.Seed], so the
// sequence of injected errors and drops is deterministic given the seed and
// the order of requests) and the recorded last request are guarded by
// mutexes. The package starts no goroutines of its own: all waiting
// (latency, gaps between chunks) happens on the request's goroutine and ends
// early when the request context is done.
//
// A dropped stream is produced by panicking with [http.ErrAbortHandler]
// after the chunks already written have been flushed; net/http then closes
// the connection without logging. Callers that invoke ServeHTTP outside
// net/http's server (for example with httptest.ResponseRecorder) must not
// enable drops.
package sim
