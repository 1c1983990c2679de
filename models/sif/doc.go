// Package sif computes smooth-inverse-frequency row weights for static
// tables: a/(a+p(w)), with a word's probability p estimated from its
// frequency rank by Zipf's law. GloVe imports (models/glove) and
// distillation (models/distill) weigh rows alike through it, so that their
// tables are interchangeable as the base of tier-1 training. It is part of
// the offline toolchain; the gateway reads the weights from the table.
// Weights is a pure function.
package sif
