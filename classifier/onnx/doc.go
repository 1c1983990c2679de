// Package onnx is the classifier's tier 2: a transformer sentence encoder
// run by ONNX Runtime, its pooled and L2-normalised output fed to a linear
// head (classifier.Linear). It is the project's only cgo package: the
// runtime is built in only with cgo and the build tag `ort` (go build
// -tags ort, CGO_ENABLED=1; files ort.go and batch_ort.go). Without either
// the package keeps the same API (stub.go; the types are declared once, in
// files without a tag), and everything that would touch the runtime
// (NewEncoder, Init, Open, Load, Embed, ...) returns an error wrapping
// classifier.ErrUnavailable that says to rebuild with -tags ort and
// CGO_ENABLED=1; CGO_ENABLED=0 go build ./..., with or without -tags ort,
// builds a gateway with tier 1 only.
//
// # The runtime library
//
// ONNX Runtime is loaded at run time (dlopen) from, in order:
// Options.Library, $TRIAGE_ORT_LIB, or <models dir>/ort/libonnxruntime.so.1,
// which scripts/fetch-ort.sh extracts from the npm package
// onnxruntime-node@1.24.3, pinned by sha256. The binding,
// github.com/yalue/onnxruntime_go v1.27.0, needs ONNX Runtime 1.24 or
// later. The library is loaded and its environment created once per
// process (Init); a later Init naming another library fails.
//
// # A model directory
//
// An encoder lives in a directory of its own:
//
//	model.onnx      the ONNX graph (name set by "model" below)
//	encoder.json    the manifest: how to feed the graph and read it
//
// and the tokenizer file the manifest names, in that directory or in the
// models directory (or its tokenizer/ subdirectory). encoder.json is one
// JSON object (see Manifest):
//
//	{
//	  "format": 1,                      // this package reads format 1
//	  "name": "bge-small-en-v1.5",      // what it is, for reports
//	  "source": "...",                  // where it came from (free text)
//	  "input": "bert",                  // "bert" or "use" (below)
//	  "pooling": "cls",                 // bert: "cls" or "mean"; use: "none"
//	  "dims": 384,                      // the embedding's length
//	  "max_tokens": 512,                // longest input, special tokens included
//	  "vocab": 30522,                   // optional: the ids the graph embeds, checked
//	                                    // against the tokenizer's vocabulary by Open and Load
//	  "model": "model.onnx",            // default model.onnx
//	  "model_sha256": "…",              // optional: checked by Open
//	  "tokenizer": "bert-base-uncased.json",
//	  "tokenizer_sha256": "…",          // optional: checked by Open and Load
//	  "inputs": ["input_ids", "attention_mask", "token_type_ids"],  // optional
//	  "output": "last_hidden_state",    // optional
//	  "cls_token": "[CLS]", "sep_token": "[SEP]"                    // optional, bert
//	}
//
// Input "bert" feeds int64 input_ids, attention_mask (all ones) and
// token_type_ids (all zeros), each [1, seq], with the text's WordPiece ids
// between [CLS] and [SEP], cut to max_tokens; the output is the last hidden
// state [1, seq, dims], pooled by the [CLS] row ("cls", as BGE models are
// trained) or by the attention-masked mean of the rows ("mean", as
// sentence-transformers' MiniLM models are). "inputs" renames the inputs in
// that order; a model exported without token_type_ids lists two names.
//
// Input "use" is the Universal Sentence Encoder (lite) signature: a sparse
// batch of SentencePiece ids, int64 indices [n, 2] whose rows are
// [0, position] and int64 values [n] (the ids); its output [1, dims] is
// already pooled ("pooling": "none"). Its tokenizer is USE-lite's
// vocab.json, read by tokenize.LoadUnigram; the empty text, which has no
// ids, gets the zero vector.
//
// Every embedding is L2-normalised, so a centroid head's logits are
// cosines.
//
// # Text preparation
//
// Model.Features, and so everything that asks tier 2 about a text (the
// gateway, eval, calibrate, train --tier 2, distill), prepares the text
// before tokenizing it: every run of whitespace becomes one space, the ends
// are trimmed, and a text whose letters are at least 70% capitals is
// lower-cased (prepare.go). The tokenizers are left as their references
// tokenize; this is what keeps the casing and spacing users add from
// moving tier 2 where tier 1 never moves.
//
// # Heads
//
// Load builds a Classifier from a heads artifact whose tier 2 has encoder
// kind "onnx": Encoder.Model names the model directory (looked up in the
// artifact's directory, then in the models directory), Encoder.ModelSHA256
// pins the sha256 of its .onnx file, and Encoder.Tokenizer /
// TokenizerSHA256, when set, override the manifest's tokenizer (looked up
// in the artifact's directory, the model directory, then the models
// directory and its tokenizer/ subdirectory).
// Encoder.MaxTokens, when set and smaller, lowers the manifest's max_tokens.
//
// # Concurrency and cost
//
// One ONNX Runtime session is shared by all goroutines (a
// DynamicAdvancedSession: ONNX Runtime's Run is safe for concurrent use;
// onnxruntime_go's AdvancedSession, which binds fixed tensors, is not). A
// semaphore bounds the Runs in flight (Options.MaxConcurrent, default
// GOMAXPROCS), each using Options.Threads intra-op threads (default 1).
// A Run cannot be interrupted: Embed checks its context before waiting for
// a slot, while waiting, and after the Run, but a Run that has started
// finishes (milliseconds for a small encoder, growing with the square of
// the tokens).
//
// With Options.Schedule (the gateway's), classifications that have a
// deadline go through a scheduler instead (sched.go): admitted only if
// they can finish by it, batched when texts queue, run by MaxConcurrent
// workers at a lower thread priority. Those without a deadline (offline
// work) run as above.
//
// # A remote encoder
//
// LoadRemote and NewRemote build the same Model and Classifier on an
// encoder another process serves over the OpenAI embeddings API (POST
// /v1/embeddings: vLLM, text-embeddings-inference, Infinity), under the
// same scheduler, with a breaker (remote.go). That part is pure Go and
// works in a build without the runtime. The heads' model directory gives
// its manifest; an engine serving another model is refused at load. The
// client prepares each text as Features does before sending it, asks for
// base64 vectors, and keeps a vector that comes back at unit length as
// sent: with `triage encode serve` (package embedserver on Model.Encode,
// this package's scheduler and session) as the engine, remote vectors are
// the local ones bit for bit.
package onnx
