package onnx

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/internal/atomicfile"
)

// ManifestFile is the manifest's name inside a model directory.
const ManifestFile = "encoder.json"

// ManifestFormat is the manifest format this package reads and writes.
const ManifestFormat = 1

// DefaultModelFile is the graph's file name when the manifest names none.
const DefaultModelFile = "model.onnx"

// LibraryEnv names the environment variable that points at the ONNX
// Runtime shared library.
const LibraryEnv = "TRIAGE_ORT_LIB"

// LibraryFile is where scripts/fetch-ort.sh puts the library, under the
// models directory.
const LibraryFile = "ort/libonnxruntime.so.1"

// TopK is how many classes a Result lists.
const TopK = 3

// Input kinds: how a graph is fed.
const (
	InputBERT = "bert" // input_ids, attention_mask, token_type_ids [1, seq]
	InputUSE  = "use"  // sparse indices [n, 2] and values [n]
)

// Poolings: how a graph's output becomes one vector.
const (
	PoolCLS  = "cls"  // the first row ([CLS]) of the last hidden state
	PoolMean = "mean" // the attention-masked mean of its rows
	PoolNone = "none" // the output is one vector already
)

// Manifest is a model directory's encoder.json: what the graph is, how to
// feed it and how to read it (see the package documentation).
type Manifest struct {
	Format          int      `json:"format"`
	Name            string   `json:"name"`
	Source          string   `json:"source,omitempty"`
	Input           string   `json:"input"`
	Pooling         string   `json:"pooling"`
	Dims            int      `json:"dims"`
	MaxTokens       int      `json:"max_tokens"`
	Vocab           int      `json:"vocab,omitempty"`
	Model           string   `json:"model,omitempty"`
	ModelSHA256     string   `json:"model_sha256,omitempty"`
	Tokenizer       string   `json:"tokenizer"`
	TokenizerSHA256 string   `json:"tokenizer_sha256,omitempty"`
	Inputs          []string `json:"inputs,omitempty"`
	Output          string   `json:"output,omitempty"`
	CLSToken        string   `json:"cls_token,omitempty"`
	SEPToken        string   `json:"sep_token,omitempty"`
}

// withDefaults fills the optional fields.
func (m Manifest) withDefaults() Manifest {
	if m.Model == "" {
		m.Model = DefaultModelFile
	}
	switch m.Input {
	case InputBERT:
		if len(m.Inputs) == 0 {
			m.Inputs = []string{"input_ids", "attention_mask", "token_type_ids"}
		}
		if m.Output == "" {
			m.Output = "last_hidden_state"
		}
		if m.CLSToken == "" {
			m.CLSToken = "[CLS]"
		}
		if m.SEPToken == "" {
			m.SEPToken = "[SEP]"
		}
	case InputUSE:
		if len(m.Inputs) == 0 {
			m.Inputs = []string{"indices", "values"}
		}
		if m.Output == "" {
			m.Output = "outputs"
		}
		if m.Pooling == "" {
			m.Pooling = PoolNone
		}
	}
	return m
}

// Validate checks the manifest, reporting every problem.
func (m *Manifest) Validate() error {
	var errs []error
	if m.Format != ManifestFormat {
		errs = append(errs, fmt.Errorf("format %d, this build reads %d", m.Format, ManifestFormat))
	}
	switch m.Input {
	case InputBERT:
		if m.Pooling != PoolCLS && m.Pooling != PoolMean {
			errs = append(errs, fmt.Errorf("pooling %q: a bert encoder pools by %q or %q", m.Pooling, PoolCLS, PoolMean))
		}
		if n := len(m.Inputs); n != 0 && n != 2 && n != 3 {
			errs = append(errs, fmt.Errorf("inputs %q: a bert encoder has 2 (ids, mask) or 3 (ids, mask, types)", m.Inputs))
		}
		if m.MaxTokens != 0 && m.MaxTokens < 3 {
			errs = append(errs, fmt.Errorf("max_tokens %d: [CLS] and [SEP] leave no room for text", m.MaxTokens))
		}
	case InputUSE:
		if m.Pooling != "" && m.Pooling != PoolNone {
			errs = append(errs, fmt.Errorf("pooling %q: a use encoder's output is pooled already (%q)", m.Pooling, PoolNone))
		}
		if n := len(m.Inputs); n != 0 && n != 2 {
			errs = append(errs, fmt.Errorf("inputs %q: a use encoder has 2 (indices, values)", m.Inputs))
		}
	default:
		errs = append(errs, fmt.Errorf("input %q: want %q or %q", m.Input, InputBERT, InputUSE))
	}
	if m.Dims < 1 {
		errs = append(errs, fmt.Errorf("dims %d", m.Dims))
	}
	if m.Vocab < 0 {
		errs = append(errs, fmt.Errorf("vocab %d", m.Vocab))
	}
	if m.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("max_tokens %d", m.MaxTokens))
	}
	if m.Tokenizer == "" {
		errs = append(errs, errors.New("no tokenizer named"))
	}
	if m.Model != "" && filepath.Base(m.Model) != m.Model {
		errs = append(errs, fmt.Errorf("model %q: a file name inside the directory, not a path", m.Model))
	}
	return errors.Join(errs...)
}

// ReadManifest reads and validates dir's encoder.json.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("onnx: model directory %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return &m, nil
}

// WriteManifest validates m and writes it as dir's encoder.json,
// atomically.
func WriteManifest(dir string, m *Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("onnx: manifest: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, ManifestFile), append(b, '\n'))
}

// Options tune the runtime.
type Options struct {
	// Library is the ONNX Runtime shared library; "" means $TRIAGE_ORT_LIB,
	// else <models dir>/ort/libonnxruntime.so.1.
	Library string
	// Threads is each Run's intra-op thread count; 0 means 1 (the gateway
	// runs many requests at once: one thread each keeps latency steady).
	Threads int
	// MaxConcurrent bounds the Runs in flight; 0 means GOMAXPROCS.
	MaxConcurrent int
	// Spin lets idle intra-op threads spin-wait for work (ONNX Runtime's
	// default): a little lower latency when Threads > 1, for a busy core.
	// Off by default.
	Spin bool

	// Schedule starts the scheduler that serves classifications with a
	// deadline (see sched.go): admission against the deadline, greedy
	// micro-batching, MaxConcurrent workers. Offline work, which has no
	// deadline, runs one Run a text either way.
	Schedule bool
	// MaxBatch is the most texts one Run takes when texts queue; 0 means
	// 8, 1 turns batching off. A bert encoder runs one text a Run.
	MaxBatch int
	// BatchTokens is the most padded tokens (texts × the longest) one
	// batched Run takes; 0 means 256.
	BatchTokens int
	// QueueLen is the most texts waiting; 0 means 32 a worker.
	QueueLen int
	// CPUShare caps the Runs at that many cores' worth of time a second,
	// as a fraction of GOMAXPROCS (0.5 on a 4-core machine: two cores);
	// 0 or 1 means no cap.
	CPUShare float64
	// Nice is the nice value of the workers' threads (Linux), so that the
	// gateway's own threads take a core first when both want it; 0 leaves
	// them as the process.
	Nice int
}

func (o Options) withDefaults() Options {
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = runtime.GOMAXPROCS(0)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 8
	}
	if o.BatchTokens <= 0 {
		o.BatchTokens = 256
	}
	if o.QueueLen <= 0 {
		o.QueueLen = 32 * o.MaxConcurrent
	}
	return o
}

// LibraryPath is the ONNX Runtime library that Options select:
// o.Library, else $TRIAGE_ORT_LIB, else modelsDir/ort/libonnxruntime.so.1.
func LibraryPath(o Options, modelsDir string) string {
	if o.Library != "" {
		return o.Library
	}
	if p := os.Getenv(LibraryEnv); p != "" {
		return p
	}
	return filepath.Join(modelsDir, LibraryFile)
}

// Available reports whether this build has the runtime (the `ort` build
// tag). A build that has it may still fail to load the library.
func Available() bool { return available }

// errNotBuilt is what every runtime call returns in a build without the
// tag.
var errNotBuilt = fmt.Errorf("%w: tier 2 (ONNX Runtime) is not in this build: rebuild with -tags ort and CGO_ENABLED=1", classifier.ErrUnavailable)

// Tokenizer turns text into the encoder's ids: Encode appends them to dst
// (no special tokens), at most max of them in all (max <= 0: no limit).
// tokenize.WordPiece is one.
type Tokenizer interface {
	Encode(dst []int32, text string, max int) []int32
}

// specialTokens is what a bert encoder's tokenizer must also do: give the
// ids of [CLS] and [SEP].
type specialTokens interface {
	ID(tok string) (int32, bool)
}

// pool writes into dst (len dims) the pooling of hidden ([seq, dims],
// row-major) by kind, the rows weighted by mask (nil: all ones).
func pool(kind string, hidden []float32, seq, dims int, mask []int64, dst []float32) {
	switch kind {
	case PoolCLS:
		copy(dst, hidden[:dims])
	case PoolMean:
		clear(dst)
		n := 0
		for s := range seq {
			if mask != nil && mask[s] == 0 {
				continue
			}
			n++
			row := hidden[s*dims : s*dims+dims]
			for i, v := range row {
				dst[i] += v
			}
		}
		if n > 0 {
			inv := 1 / float32(n)
			for i := range dst {
				dst[i] *= inv
			}
		}
	default: // PoolNone: the output is [1, dims]
		copy(dst, hidden[:dims])
	}
}
