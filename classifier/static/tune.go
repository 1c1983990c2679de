package static

import (
	"fmt"
	"sort"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/tokenize"
	"github.com/triagegw/triage/models"
)

// TuneOptions tunes Tune.
type TuneOptions struct {
	Epochs       int     // default 25
	LearningRate float32 // initial step, decayed linearly to 0; default 0.2
	Balance      bool    // weight examples by inverse class frequency
	Dropout      float32 // drop each token of an example with this probability per step
	Seed         uint64  // default 1
	MaxTokens    int     // default DefaultMaxTokens
	// Bigrams adds this many hashed token-bigram buckets, learned from zero.
	Bigrams int
	// SIF weights the mean by the base table's row weights (rare words
	// count more), in training and in the tuned table; rows the base gives
	// no weight (pieces without a vector, new words, bigrams) weigh 1.
	SIF bool
	// Prune drops the base's extra-word rows no training text uses: their
	// vectors were never tuned, and the pieces cover those words.
	Prune bool
	// MinCount gives a word of its own row when it appears at least this
	// many times in the training texts and the vocabulary would split it
	// (starting from the mean of its pieces' vectors). 0: no new words.
	MinCount int
	// Structure adds a row for each of Markers, learned from zero, and
	// each text's markers to its rows (see AppendMarkers).
	Structure bool
	// Targets, when set, are each text's target distribution over the
	// classes (soft labels: a teacher's probabilities, or a mix of them
	// with the labels), learned instead of y (see classifier.BagOptions).
	Targets [][]float32
	// Progress, if set, is called after each epoch with the mean loss.
	Progress func(epoch int, loss float64)
}

// Tune trains the token vectors and a softmax head together, fastText's
// supervised way (classifier.TrainBag): the features are the plain mean of
// the token (and bigram) vectors, and each example's gradient flows into the
// head and into its rows. It starts from base's vectors and vocabulary and
// returns a new f32 table with uniform weights (plus the bigram rows), the
// head, and the encoder settings that reproduce the features.
func Tune(tok *tokenize.WordPiece, base *models.Table, texts []string, y []int, classes []string, o TuneOptions) (*models.Table, *classifier.Linear, classifier.Encoder, error) {
	if o.Targets != nil && len(o.Targets) != len(texts) {
		return nil, nil, classifier.Encoder{}, fmt.Errorf("static: %d targets for %d texts", len(o.Targets), len(texts))
	}
	if o.Epochs == 0 {
		o.Epochs = 25
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	enc := classifier.Encoder{Kind: "static", MaxTokens: o.MaxTokens, Weighting: "uniform", Normalize: "mean", Bigrams: o.Bigrams, Structure: o.Structure}
	d := base.Dims()
	// Which of the base's extra words the training texts use, and which
	// frequent training words the vocabulary splits (new rows).
	used := make([]bool, len(base.ExtraWords()))
	count := map[string]int{}
	for _, t := range texts {
		tok.Words(t, func(w []byte) bool {
			if r, ok := base.Word(w); ok {
				used[int(r)-base.VocabSize()] = true
			} else if _, ok := tok.ID(string(w)); !ok && o.MinCount > 0 {
				count[string(w)]++
			}
			return true
		})
	}
	var words, newWords []string
	var fromBase []int32 // base row of each kept extra word
	for i, w := range base.ExtraWords() {
		if used[i] || !o.Prune {
			words = append(words, w)
			fromBase = append(fromBase, int32(base.VocabSize()+i))
		}
	}
	for w, n := range count {
		if n >= o.MinCount && len(w) > 1 {
			newWords = append(newWords, w)
		}
	}
	sort.Strings(newWords)
	words = append(words, newWords...)
	if o.Structure {
		words = append(words, Markers...) // rows from zero, after the new words
	}
	vocab := base.VocabSize()
	rows := vocab + len(words) + o.Bigrams
	emb := make([]float32, rows*d)
	for r := range vocab {
		base.Vector(int32(r), emb[r*d:r*d+d])
	}
	for i, br := range fromBase {
		base.Vector(br, emb[(vocab+i)*d:(vocab+i)*d+d])
	}
	var pieces []int32
	tmp := make([]float32, d)
	for i, w := range newWords {
		row := emb[(vocab+len(fromBase)+i)*d:][:d]
		pieces = tok.AppendPieces(pieces[:0], []byte(w))
		for _, p := range pieces {
			base.Vector(p, tmp)
			for j := range row {
				row[j] += tmp[j] / float32(len(pieces))
			}
		}
	}
	flat := func() [][]float32 {
		v := make([][]float32, rows)
		for r := range rows {
			v[r] = emb[r*d : r*d+d]
		}
		return v
	}
	ones := make([]float32, rows)
	for i := range ones {
		ones[i] = 1
		if !o.SIF {
			continue
		}
		var w float32
		switch {
		case i < vocab:
			w = base.Weight(int32(i))
		case i < vocab+len(fromBase):
			w = base.Weight(fromBase[i-vocab])
		}
		if w > 0 {
			ones[i] = w
		}
	}
	m := base.Manifest
	m.Method = "tuned"
	m.Source = fmt.Sprintf("tuned from %s (%s) on %d labelled texts; %d of %d extra words kept, %d added (min count %d)",
		base.Manifest.Name, base.Manifest.Method, len(texts), len(fromBase), len(base.ExtraWords()), len(newWords), o.MinCount)
	if o.Targets != nil {
		m.Source = fmt.Sprintf("tuned from %s (%s) on the soft targets of %d texts; %d of %d extra words kept, %d added (min count %d)",
			base.Manifest.Name, base.Manifest.Method, len(texts), len(fromBase), len(base.ExtraWords()), len(newWords), o.MinCount)
	}
	m.Weighting = "uniform"
	m.Quant = ""
	m.ExtraWords = 0
	m.Buckets = o.Bigrams
	m.Created = time.Now().UTC().Format(time.RFC3339)
	// The table tokenises the training texts, then carries the result.
	layout, err := models.NewTable(m, vocab, words, flat(), ones)
	if err != nil {
		return nil, nil, enc, err
	}
	var markers [numMarkers]int32
	for i, w := range Markers {
		if r, ok := layout.Word([]byte(w)); ok {
			markers[i] = r
		}
	}
	docs := make([][]int32, len(texts))
	for i, t := range texts {
		docs[i] = AppendBigrams(Rows(tok, layout, nil, t, o.MaxTokens), rows, o.Bigrams)
		if o.Structure {
			docs[i] = AppendMarkers(docs[i], t, &markers)
		}
	}
	bo := classifier.BagOptions{
		Epochs: o.Epochs, LearningRate: o.LearningRate, Balance: o.Balance, Dropout: o.Dropout, Seed: o.Seed, Targets: o.Targets, Progress: o.Progress,
	}
	if o.SIF {
		bo.RowWeight = ones
		enc.Weighting = "table"
		m.Weighting = "sif from " + base.Manifest.Name + " (1 for rows it does not weigh)"
	}
	head := classifier.TrainBag(emb, d, docs, y, classes, bo)
	tuned, err := models.NewTable(m, vocab, words, flat(), ones)
	if err != nil {
		return nil, nil, enc, err
	}
	return tuned, head, enc, nil
}
