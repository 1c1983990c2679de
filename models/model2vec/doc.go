// Package model2vec imports a model2vec (potion) static embedding model —
// model.safetensors and tokenizer.json — into a static table whose rows
// follow a given vocabulary, and reads safetensors files. It is part of the
// offline toolchain ("triage models import model2vec").
//
// The functions are safe for concurrent use and start no goroutine.
package model2vec
