// Package embedserver serves a sentence encoder over the OpenAI
// embeddings API (POST /v1/embeddings), as vLLM and text-embeddings-
// inference serve one: `triage encode serve`, tier 2 as a deployment of
// its own that gateways reach with tier2.encoder.
//
// It owns the HTTP edge only: the request's checks and limits, the
// answer's JSON, the OpenAI-shaped errors, readiness and the metrics. The
// vectors come from an Encoder, which cmd/triage makes from the gateway's
// own tier-2 code (classifier/onnx's Model with its scheduler): each text
// of a request is submitted to it with the request's deadline, so texts of
// concurrent requests are batched together, a text that cannot finish by
// the deadline is refused at once (429) and a full queue sheds (429)
// instead of growing.
//
// A Server is safe for concurrent use. It starts no goroutine of its own
// beyond one per text of a request being served, each ending with the
// request.
package embedserver
