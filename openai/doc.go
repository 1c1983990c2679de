// Package openai holds the few OpenAI wire shapes the gateway needs and the
// byte-level operations on request bodies that keep the hot path free of a
// full JSON unmarshal:
//
//   - Extract validates a request body in one pass and records the routing
//     fields (model, stream) and where the prompt-bearing fields lie, without
//     decoding anything else;
//   - SpliceModel replaces the model name in the raw bytes, leaving every
//     other byte as the client sent it;
//   - Error is the OpenAI error body, and WriteError sends it.
//
// Everything here is a pure function of its inputs and safe for concurrent
// use. The package starts no goroutines.
package openai
