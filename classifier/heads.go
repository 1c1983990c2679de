package classifier

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/triagegw/triage/internal/atomicfile"
)

// HeadsFile is the artifact's manifest inside its directory.
const HeadsFile = "heads.json"

// HeadsFormat is the artifact format this package reads and writes.
const HeadsFormat = 1

// Heads is the heads artifact: one versioned unit holding the classes, each
// tier's head and what feeds it, how and on what each was trained, and the
// per-class floors per tier. It is loaded, validated and swapped as a whole.
type Heads struct {
	Format  int      `json:"format"`
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Classes []string `json:"classes"`
	Tier1   *Tier    `json:"tier1,omitempty"`
	Tier2   *Tier    `json:"tier2,omitempty"`
	// Floors are the least score at which each tier's verdict is trusted,
	// per class; calibration fills them. A missing floor means the tier's
	// verdict for that class is not trusted on its own.
	Floors map[string]Floors `json:"floors"`
	// Routing holds what `triage calibrate --rules` fitted for rule sets
	// over these heads: per-route floors and the escalation settings.
	Routing *Routing `json:"routing,omitempty"`

	// Dir is where the artifact was loaded from (not serialised).
	Dir string `json:"-"`
}

// Floors are one class's floors per tier.
type Floors struct {
	Tier1 *float32 `json:"tier1,omitempty"`
	Tier2 *float32 `json:"tier2,omitempty"`
}

// Routing is what calibration fitted at the level the rules decide: the
// least route mass (the summed probability of a route's classes) at which
// each tier's verdict takes a route, the routed mass from which tier 1
// escalates, the floor tier 1 falls back to when tier 2 cannot answer, and
// the weight of tier 1 in tier 2's decision.
type Routing struct {
	// Routes are the fitted floors by route name; a rule set uses one only
	// when its route of that name takes exactly the same classes.
	Routes        map[string]RouteFloors `json:"routes,omitempty"`
	EscalateAt    *float32               `json:"escalate_at,omitempty"`
	FallbackFloor *float32               `json:"fallback_floor,omitempty"`
	Mix           *float32               `json:"mix,omitempty"`
	// UnfamiliarAt is the distance from tier 1's top class's centroid
	// from which its answer escalates however sure it is (0: off); it
	// needs tier 1's centroids.
	UnfamiliarAt *float32 `json:"unfamiliar_at,omitempty"`
	// Fit says how: the target precision, the data and its sha256.
	Fit map[string]string `json:"fit,omitempty"`
}

// RouteFloors are one route's fitted floors and the classes it took.
type RouteFloors struct {
	Classes []string `json:"classes"`
	Floors
}

// Tier is one tier's head and its provenance.
type Tier struct {
	Encoder  Encoder  `json:"encoder"`
	Head     Linear   `json:"head"`
	Training Training `json:"training"`
	// Eval holds reports on held-out data, by dataset name (and slice).
	Eval map[string]Report `json:"eval,omitempty"`
	// Centroids, tier 1 only and optional, are the unit mean of its
	// feature vectors per class: tier 1 then reports each text's distance
	// from its predicted class's (Result.Distance).
	Centroids *Centroids `json:"centroids,omitempty"`
}

// Encoder says what turns text into the head's features.
type Encoder struct {
	// Kind is "static" (tier 1: token vectors, weighted mean) or "onnx".
	Kind string `json:"kind"`
	// Table names the static table file: looked up in the artifact's
	// directory first, then in the models directory. TableSHA256 pins it.
	Table       string `json:"table,omitempty"`
	TableSHA256 string `json:"table_sha256,omitempty"`
	// Tokenizer names the tokenizer.json (same lookup); TokenizerSHA256
	// pins it.
	Tokenizer       string `json:"tokenizer,omitempty"`
	TokenizerSHA256 string `json:"tokenizer_sha256,omitempty"`
	// MaxTokens caps the tokens a text contributes, so cost stops growing.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Weighting is "table" (each row's SIF weight) or "uniform".
	Weighting string `json:"weighting,omitempty"`
	// Normalize is "l2" (unit-length features) or "mean" (plain average).
	Normalize string `json:"normalize,omitempty"`
	// Bigrams is the number of hashed token-bigram buckets: the table's last
	// rows. 0: unigrams only.
	Bigrams int `json:"bigrams,omitempty"`
	// Structure: the table has rows for static.Markers, and a text's
	// structural features add them to its rows; tier 1 only.
	Structure bool `json:"structure,omitempty"`
	// Confidence, when set, scales a text's logits down by how unlike the
	// training data it looks (see Confidence); tier 1 only.
	Confidence *Confidence `json:"confidence,omitempty"`
	// Model names the tier-2 model directory (same lookup).
	Model       string `json:"model,omitempty"`
	ModelSHA256 string `json:"model_sha256,omitempty"`
}

// Training records how a head was made.
type Training struct {
	Data       string         `json:"data"`
	DataSHA256 string         `json:"data_sha256"`
	Rows       int            `json:"rows"`
	Method     string         `json:"method"`
	Params     map[string]any `json:"params,omitempty"`
	Seed       uint64         `json:"seed"`
	At         string         `json:"at"`
	Tool       string         `json:"tool"`
}

// LoadHeads reads and validates the artifact in dir. A path to the
// artifact's heads.json itself stands for its directory.
func LoadHeads(dir string) (*Heads, error) {
	if fi, err := os.Stat(dir); err == nil && fi.Mode().IsRegular() {
		if filepath.Base(dir) != HeadsFile {
			return nil, fmt.Errorf("heads %s: a file: give the directory that holds %s", dir, HeadsFile)
		}
		dir = filepath.Dir(dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, HeadsFile))
	if err != nil {
		return nil, fmt.Errorf("heads %s: %w", dir, err)
	}
	var h Heads
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("heads %s: %s: %w", dir, HeadsFile, err)
	}
	h.Dir = dir
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("heads %s: %w", dir, err)
	}
	return &h, nil
}

// Validate checks the artifact's consistency, reporting every problem.
func (h *Heads) Validate() error {
	var errs []error
	if h.Format != HeadsFormat {
		errs = append(errs, fmt.Errorf("format %d, this build reads %d", h.Format, HeadsFormat))
	}
	if len(h.Classes) < 2 {
		errs = append(errs, fmt.Errorf("%d classes, need at least 2", len(h.Classes)))
	}
	seen := map[string]bool{}
	for _, c := range h.Classes {
		if c == "" || seen[c] {
			errs = append(errs, fmt.Errorf("class %q empty or repeated", c))
		}
		seen[c] = true
	}
	for name, t := range map[string]*Tier{"tier1": h.Tier1, "tier2": h.Tier2} {
		if t == nil {
			continue
		}
		if err := t.Head.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if fmt.Sprint(t.Head.Classes) != fmt.Sprint(h.Classes) {
			errs = append(errs, fmt.Errorf("%s: head classes %v differ from the artifact's %v", name, t.Head.Classes, h.Classes))
		}
		if c := t.Centroids; c != nil && name == "tier2" {
			errs = append(errs, errors.New("tier2: centroids are tier 1's only"))
		} else if c != nil {
			if err := c.Validate(len(t.Head.Classes), t.Head.Dims); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	if h.Tier1 == nil && h.Tier2 == nil {
		errs = append(errs, errors.New("no tier has a head"))
	}
	var unknown []string
	for c, f := range h.Floors {
		if !seen[c] {
			unknown = append(unknown, c)
		}
		for _, v := range []*float32{f.Tier1, f.Tier2} {
			if v != nil && (*v < 0 || *v > 1) {
				errs = append(errs, fmt.Errorf("floors[%q]: %v outside [0,1]", c, *v))
			}
		}
	}
	sort.Strings(unknown)
	for _, c := range unknown {
		errs = append(errs, fmt.Errorf("floors name unknown class %q", c))
	}
	return errors.Join(errs...)
}

// numberArray matches a JSON array of numbers as MarshalIndent lays it out.
var numberArray = regexp.MustCompile(`\[\n\s*-?[0-9][0-9.eE+-]*(?:,\n\s*-?[0-9][0-9.eE+-]*)*\n\s*\]`)

// Save writes the manifest into dir (created if needed), atomically.
func (h *Heads) Save(dir string) error {
	h.Format = HeadsFormat
	if err := h.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	// Weights one number per line would make a tier-2 head 135,000 lines:
	// arrays of numbers go on one line each.
	b = numberArray.ReplaceAllFunc(b, func(m []byte) []byte {
		return bytes.Map(func(r rune) rune {
			if r == ' ' || r == '\n' {
				return -1
			}
			return r
		}, m)
	})
	return atomicfile.WriteBytes(filepath.Join(dir, HeadsFile), append(b, '\n'))
}

// Tier returns tier n (1 or 2) of the artifact, nil if it has none.
func (h *Heads) Tier(n int) *Tier {
	switch n {
	case 1:
		return h.Tier1
	case 2:
		return h.Tier2
	}
	return nil
}

// TierFloors returns the floors of tier n (1 or 2) by class: the classes
// with a floor on that tier.
func (h *Heads) TierFloors(n int) map[string]float32 {
	m := map[string]float32{}
	for c, f := range h.Floors {
		v := f.Tier1
		if n == 2 {
			v = f.Tier2
		}
		if v != nil {
			m[c] = *v
		}
	}
	return m
}

// Calibrated returns a copy of h whose tier n (1 or 2) has the given
// temperature (0 means 1, as in Linear) and, for each class in floors, the given floor; the other
// floors are kept. Its version is h's with "+cal" appended (once). h is not
// modified; the copy shares nothing mutable with it but the heads' weights,
// which neither changes.
func (h *Heads) Calibrated(n int, temperature float32, floors map[string]float32) (*Heads, error) {
	t := h.Tier(n)
	if t == nil {
		return nil, fmt.Errorf("heads %s: no tier %d to calibrate", h.Dir, n)
	}
	if temperature < 0 || math.IsNaN(float64(temperature)) || math.IsInf(float64(temperature), 0) {
		return nil, fmt.Errorf("heads %s: temperature %v", h.Dir, temperature)
	}
	cal := *h
	tc := *t
	tc.Head.Temperature = temperature
	if n == 1 {
		cal.Tier1 = &tc
	} else {
		cal.Tier2 = &tc
	}
	if !strings.HasSuffix(h.Version, "+cal") {
		cal.Version = h.Version + "+cal"
	}
	cal.Floors = make(map[string]Floors, len(h.Floors)+len(floors))
	for c, f := range h.Floors {
		cal.Floors[c] = f
	}
	for c, v := range floors {
		f := cal.Floors[c]
		if n == 1 {
			f.Tier1 = &v
		} else {
			f.Tier2 = &v
		}
		cal.Floors[c] = f
	}
	return &cal, nil
}

// CopyTo saves h into dir as Save does, with the files it names that live
// in its own directory (the tier-1 table), so that the copy stands on its
// own. A file the artifact finds in the models directory instead is not
// copied: the copy finds it there too.
func (h *Heads) CopyTo(dir string) error {
	if err := h.Save(dir); err != nil {
		return err
	}
	t := h.Tier1
	if t == nil || t.Encoder.Table == "" || h.Dir == "" {
		return nil
	}
	src, dst := filepath.Join(h.Dir, t.Encoder.Table), filepath.Join(dir, t.Encoder.Table)
	if same(src, dst) {
		return nil
	}
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// same reports whether a and b are one existing file.
func same(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// Resolve finds a file an artifact names: in its own directory first, then
// in modelsDir (and its tables/ and tokenizer/ subdirectories).
func (h *Heads) Resolve(name, modelsDir string) (string, error) {
	cands := []string{filepath.Join(h.Dir, name)}
	if modelsDir != "" {
		cands = append(cands, filepath.Join(modelsDir, name), filepath.Join(modelsDir, "tables", name), filepath.Join(modelsDir, "tokenizer", name))
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s not found in %v (run scripts/setup.sh to build model files)", name, cands)
}
