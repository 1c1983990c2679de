// Package vocab reads a tokenizer's vocabulary, as token strings in id
// order, from a Hugging Face tokenizer.json: the rows a static table
// follows. Importers (models/glove, models/model2vec) and distillation
// (models/distill) take their vocabulary from it; the gateway's tokenizers
// (classifier/tokenize) read tokenizer.json themselves. It is part of the
// offline toolchain. The functions are safe for concurrent use.
package vocab
