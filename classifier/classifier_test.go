package classifier

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSetTop(t *testing.T) {
	classes := []string{"a", "b", "c", "d"}
	var r Result
	r.SetTop(classes, []float32{0.1, 0.5, 0.15, 0.25}, 3)
	if r.Class != "b" || r.Score != 0.5 || len(r.Top) != 3 || r.Top[1].Class != "d" || r.Top[2].Class != "c" {
		t.Fatalf("SetTop = %+v", r)
	}
	r.SetTop(classes, []float32{0.7, 0.1, 0.1, 0.1}, 10)
	if len(r.Top) != 4 || r.Class != "a" {
		t.Fatalf("SetTop(k > classes) = %+v", r)
	}
}

func TestSetTopAllocs(t *testing.T) {
	classes := []string{"a", "b", "c", "d"}
	probs := []float32{0.1, 0.2, 0.3, 0.4}
	var r Result
	r.SetTop(classes, probs, 3)
	if n := testing.AllocsPerRun(100, func() { r.SetTop(classes, probs, 3) }); n != 0 {
		t.Fatalf("SetTop allocates %v times once Top has room", n)
	}
}

func TestSoftmaxAndNormalize(t *testing.T) {
	p := []float32{1, 2, 3}
	Softmax(p, 1)
	want := []float64{0.09003057, 0.24472847, 0.66524096}
	for i := range p {
		if math.Abs(float64(p[i])-want[i]) > 1e-6 {
			t.Fatalf("Softmax = %v, want %v", p, want)
		}
	}
	q := []float32{1, 2, 3}
	Softmax(q, 1000) // a high temperature flattens
	if q[2]-q[0] > 0.001 {
		t.Fatalf("Softmax at T=1000 = %v, want nearly uniform", q)
	}
	big := []float32{1000, 1001}
	Softmax(big, 1)
	if math.IsNaN(float64(big[0])) || math.Abs(float64(big[1])-0.7310586) > 1e-6 {
		t.Fatalf("Softmax overflowed: %v", big)
	}
	v := []float32{3, 4}
	if n := L2Normalize(v); n != 5 || v[0] != 0.6 || v[1] != 0.8 {
		t.Fatalf("L2Normalize = %v (norm %v)", v, n)
	}
	z := []float32{0, 0}
	if L2Normalize(z) != 0 || z[0] != 0 {
		t.Fatal("L2Normalize(0) changed the vector")
	}
}

// blobs makes k Gaussian clusters in d dimensions.
func blobs(n, k, d int, spread float64, noiseSeed uint64) ([][]float32, []int) {
	rng := rand.New(rand.NewPCG(1, 1)) // the same centers every time
	centers := make([][]float32, k)
	for c := range centers {
		centers[c] = make([]float32, d)
		for i := range centers[c] {
			centers[c][i] = float32(rng.NormFloat64())
		}
	}
	rng = rand.New(rand.NewPCG(noiseSeed, 2))
	x := make([][]float32, n)
	y := make([]int, n)
	for i := range x {
		c := i % k
		y[i] = c
		x[i] = make([]float32, d)
		for j := range x[i] {
			x[i][j] = centers[c][j] + float32(rng.NormFloat64()*spread)
		}
		L2Normalize(x[i])
	}
	return x, y
}

func accuracy(l *Linear, x [][]float32, y []int) float64 {
	p := make([]float32, len(l.Classes))
	hit := 0
	for i := range x {
		l.Probs(x[i], p)
		if Argmax(p) == y[i] {
			hit++
		}
	}
	return float64(hit) / float64(len(x))
}

func TestTrainSoftmaxAndCentroid(t *testing.T) {
	classes := []string{"a", "b", "c", "d", "e"}
	x, y := blobs(2000, 5, 16, 0.3, 1)
	xt, yt := blobs(500, 5, 16, 0.3, 2) // the same centers, fresh noise
	sm := TrainSoftmax(x, y, classes, SoftmaxOptions{Epochs: 20})
	if err := sm.Validate(); err != nil {
		t.Fatal(err)
	}
	if a := accuracy(sm, xt, yt); a < 0.95 {
		t.Fatalf("softmax regression accuracy %.3f on separable clusters, want > 0.95", a)
	}
	ce := TrainCentroid(x, y, classes)
	if a := accuracy(ce, xt, yt); a < 0.95 {
		t.Fatalf("nearest centroid accuracy %.3f, want > 0.95", a)
	}
	// Deterministic for a seed.
	sm2 := TrainSoftmax(x, y, classes, SoftmaxOptions{Epochs: 20})
	for i := range sm.W {
		if sm.W[i] != sm2.W[i] {
			t.Fatal("TrainSoftmax is not deterministic for a seed")
		}
	}
}

func TestClassWeightsBalance(t *testing.T) {
	y := []int{0, 0, 0, 1}
	w := ClassWeights(y, 2, true)
	if w[0]*3 != w[1]*1 || math.Abs(float64(w[0]*3+w[1])-4) > 1e-6 {
		t.Fatalf("balanced weights %v: each class must carry the same total weight", w)
	}
	if w := ClassWeights(y, 2, false); w[0] != 1 || w[1] != 1 {
		t.Fatalf("unbalanced weights %v", w)
	}
}

func TestFitTemperatureRecoversTruth(t *testing.T) {
	// Labels drawn from softmax(z / 2.5): the fitted temperature is 2.5.
	rng := rand.New(rand.NewPCG(7, 7))
	const T0 = 2.5
	var logits [][]float32
	var y []int
	for range 20000 {
		z := make([]float32, 4)
		for j := range z {
			z[j] = float32(rng.NormFloat64() * 4)
		}
		p := append([]float32(nil), z...)
		Softmax(p, T0)
		u, c := rng.Float32(), 0
		for c < 3 && u > p[c] {
			u -= p[c]
			c++
		}
		logits, y = append(logits, z), append(y, c)
	}
	if got := FitTemperature(logits, y); math.Abs(float64(got)-T0) > 0.15 {
		t.Fatalf("FitTemperature = %.3f, want %.1f", got, T0)
	}
}

func TestEvaluate(t *testing.T) {
	classes := []string{"x", "y"}
	probs := [][]float32{{0.9, 0.1}, {0.8, 0.2}, {0.3, 0.7}, {0.6, 0.4}}
	y := []int{0, 1, 1, 0}
	r := Evaluate(classes, probs, y)
	// predictions x, x, y, x: 3 of 4 right.
	if r.Accuracy != 0.75 || r.N != 4 {
		t.Fatalf("accuracy %v n %d", r.Accuracy, r.N)
	}
	px, py := r.PerClass["x"], r.PerClass["y"]
	if math.Abs(px.Precision-2.0/3) > 1e-9 || px.Recall != 1 || py.Precision != 1 || py.Recall != 0.5 {
		t.Fatalf("per class %+v %+v", px, py)
	}
	// ECE: bins 0.9 (hit), 0.8 (miss), 0.7 (hit), 0.6 (hit), one item each:
	// (|1-0.9| + |0-0.8| + |1-0.7| + |1-0.6|) / 4 = 0.4.
	if math.Abs(r.ECE-0.4) > 1e-6 {
		t.Fatalf("ECE %v, want 0.4", r.ECE)
	}
}

func TestTrainBag(t *testing.T) {
	// Rows 0-9 signal class 0, 10-19 class 1, 20-29 are noise shared by both.
	rng := rand.New(rand.NewPCG(3, 3))
	var docs [][]int32
	var y []int
	for i := range 2000 {
		c := i % 2
		var doc []int32
		for range 6 {
			doc = append(doc, int32(20+rng.IntN(10)))
		}
		doc = append(doc, int32(c*10+rng.IntN(10)))
		docs, y = append(docs, doc), append(y, c)
	}
	const d = 8
	init := func() []float32 {
		emb := make([]float32, 30*d)
		r := rand.New(rand.NewPCG(9, 9))
		for i := range emb {
			emb[i] = float32(r.NormFloat64()) * 0.1
		}
		return emb
	}
	emb := init()
	head := TrainBag(emb, d, docs, y, []string{"zero", "one"}, BagOptions{Epochs: 5, LearningRate: 0.5})
	h := make([]float32, d)
	p := make([]float32, 2)
	hit := 0
	for i, doc := range docs {
		BagFeatures(emb, d, doc, h)
		head.Probs(h, p)
		if Argmax(p) == y[i] {
			hit++
		}
	}
	if a := float64(hit) / float64(len(docs)); a < 0.97 {
		t.Fatalf("TrainBag accuracy %.3f on one signal token among six noise tokens, want > 0.97", a)
	}
	emb2 := init()
	head2 := TrainBag(emb2, d, docs, y, []string{"zero", "one"}, BagOptions{Epochs: 5, LearningRate: 0.5})
	for i := range emb {
		if emb[i] != emb2[i] {
			t.Fatal("TrainBag is not deterministic for a seed")
		}
	}
	if head.W[0] != head2.W[0] {
		t.Fatal("TrainBag heads differ for the same seed")
	}
}

func TestHeadsSaveLoadValidate(t *testing.T) {
	dir := t.TempDir()
	f := float32(0.8)
	h := &Heads{Name: "x", Version: "1", Classes: []string{"a", "b"},
		Tier1: &Tier{Encoder: Encoder{Kind: "static", Table: "t.tbl"},
			Head: Linear{Kind: "softmax", Classes: []string{"a", "b"}, Dims: 2, W: []float32{1, 0, 0, 1}, B: []float32{0, 0}, Temperature: 1}},
		Floors: map[string]Floors{"a": {Tier1: &f}}}
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadHeads(dir)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Floors["a"].Tier1 != 0.8 || got.Tier1.Head.W[3] != 1 || got.Dir != dir {
		t.Fatalf("round trip = %+v", got)
	}
	// The path of heads.json itself names the artifact; another file does not.
	if got, err := LoadHeads(filepath.Join(dir, HeadsFile)); err != nil || got.Dir != dir {
		t.Fatalf("LoadHeads(dir/heads.json) = %+v, %v", got, err)
	}
	other := filepath.Join(dir, "t.tbl")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHeads(other); err == nil || !strings.Contains(err.Error(), "give the directory") {
		t.Fatalf("LoadHeads(a table file) = %v", err)
	}
	// Every problem is reported.
	bad := `{"format":1,"classes":["a","a"],"tier1":{"encoder":{"kind":"static"},"head":{"classes":["a","b"],"dims":2,"w":[1],"b":[0,0]}},"floors":{"zzz":{"tier1":1.5}}}`
	if err := os.WriteFile(filepath.Join(dir, HeadsFile), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadHeads(dir)
	if err == nil {
		t.Fatal("LoadHeads accepted a broken artifact")
	}
	for _, want := range []string{`class "a" empty or repeated`, "w has 1 values", `floors name unknown class "zzz"`, "outside [0,1]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if _, err := h.Resolve("missing.tbl", t.TempDir()); err == nil || !strings.Contains(err.Error(), "setup") {
		t.Fatalf("Resolve(missing) = %v", err)
	}
}

// TestHeadsCalibratedCopyTo: a calibrated copy sets one tier's temperature
// and floors, keeps the rest, leaves the original alone, and travels with
// its table.
func TestHeadsCalibratedCopyTo(t *testing.T) {
	src := t.TempDir()
	f1, f2 := float32(0.7), float32(0.6)
	head := Linear{Kind: "softmax", Classes: []string{"a", "b"}, Dims: 2, W: []float32{1, 0, 0, 1}, B: []float32{0, 0}, Temperature: 1.5}
	h := &Heads{Name: "x", Version: "v1", Classes: []string{"a", "b"},
		Tier1:  &Tier{Encoder: Encoder{Kind: "static", Table: "t.tbl"}, Head: head},
		Tier2:  &Tier{Encoder: Encoder{Kind: "onnx", Model: "m"}, Head: head},
		Floors: map[string]Floors{"a": {Tier1: &f1, Tier2: &f2}}}
	if err := h.Save(src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "t.tbl"), []byte("table"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := LoadHeads(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.TierFloors(2); len(got) != 1 || got["a"] != 0.6 {
		t.Fatalf("TierFloors(2) = %v", got)
	}
	cal, err := h.Calibrated(1, 2.5, map[string]float32{"b": 0.4, "a": 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if cal.Tier1.Head.Temperature != 2.5 || cal.Tier2.Head.Temperature != 1.5 || cal.Version != "v1+cal" {
		t.Fatalf("Calibrated: temperatures %v %v, version %q", cal.Tier1.Head.Temperature, cal.Tier2.Head.Temperature, cal.Version)
	}
	if got := cal.TierFloors(1); len(got) != 2 || got["a"] != 0.9 || got["b"] != 0.4 || *cal.Floors["a"].Tier2 != 0.6 {
		t.Fatalf("Calibrated floors: tier 1 %v, a's tier 2 %v", got, *cal.Floors["a"].Tier2)
	}
	if h.Tier1.Head.Temperature != 1.5 || *h.Floors["a"].Tier1 != 0.7 || len(h.Floors) != 1 || h.Version != "v1" {
		t.Fatalf("Calibrated modified the original: %+v", h)
	}
	again, err := cal.Calibrated(2, 1.2, nil)
	if err != nil || again.Version != "v1+cal" || again.Tier2.Head.Temperature != 1.2 {
		t.Fatalf("Calibrated twice: version %q, err %v", again.Version, err)
	}
	if _, err := (&Heads{Tier1: h.Tier1}).Calibrated(2, 1, nil); err == nil {
		t.Error("Calibrated accepted a tier the heads lack")
	}
	if _, err := h.Calibrated(1, float32(math.NaN()), nil); err == nil {
		t.Error("Calibrated accepted a NaN temperature")
	}
	dst := filepath.Join(t.TempDir(), "cal")
	if err := cal.CopyTo(dst); err != nil {
		t.Fatal(err)
	}
	back, err := LoadHeads(dst)
	if err != nil || back.Version != "v1+cal" || *back.Floors["b"].Tier1 != 0.4 {
		t.Fatalf("CopyTo: %+v, %v", back, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "t.tbl")); err != nil || string(b) != "table" {
		t.Fatalf("CopyTo left the table behind: %q, %v", b, err)
	}
	// In place, and without the table in the artifact's directory.
	if err := cal.CopyTo(src); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "t.tbl")); string(b) != "table" {
		t.Fatalf("CopyTo in place: table %q", b)
	}
	os.Remove(filepath.Join(src, "t.tbl"))
	if err := cal.CopyTo(t.TempDir()); err != nil {
		t.Fatalf("CopyTo without the table in its directory: %v", err)
	}
}

// TestMLP: a hidden layer learns what no linear head can (XOR), its logits
// match a direct computation, it validates its shapes, and training is
// deterministic whatever the number of workers.
func TestMLP(t *testing.T) {
	var x [][]float32
	var y []int
	for i := range 400 {
		a, b := float32(i%2), float32((i/2)%2)
		x = append(x, []float32{a + 0.01*float32(i%7), b - 0.01*float32(i%5), 1})
		y = append(y, int(a)^int(b))
	}
	classes := []string{"same", "differ"}
	lin := TrainSoftmax(x, y, classes, SoftmaxOptions{})
	mlp := TrainMLP(x, y, classes, MLPOptions{Hidden: 16, Epochs: 200, LearningRate: 1e-2, Dropout: -1, Workers: 2})
	acc := func(h *Linear) float64 {
		right := 0
		out := make([]float32, 2)
		for i := range x {
			h.Logits(x[i], out)
			if (out[1] > out[0]) == (y[i] == 1) {
				right++
			}
		}
		return float64(right) / float64(len(x))
	}
	if a := acc(lin); a > 0.8 {
		t.Fatalf("a linear head solved XOR (%.2f): the test proves nothing", a)
	}
	if a := acc(mlp); a < 0.99 {
		t.Fatalf("mlp accuracy %.3f on XOR", a)
	}
	if err := mlp.Validate(); err != nil {
		t.Fatal(err)
	}
	// Logits against the formula.
	out := make([]float32, 2)
	mlp.Logits(x[3], out)
	for c := range 2 {
		want := mlp.B[c]
		for j := range mlp.Hidden {
			h := mlp.B1[j]
			for i := range 3 {
				h += mlp.W1[j*3+i] * x[3][i]
			}
			want += mlp.W[c*mlp.Hidden+j] * max(h, 0)
		}
		if d := out[c] - want; d > 1e-5 || d < -1e-5 {
			t.Fatalf("logit %d = %v, want %v", c, out[c], want)
		}
	}
	one := TrainMLP(x, y, classes, MLPOptions{Hidden: 8, Epochs: 3, Workers: 1, Seed: 7})
	three := TrainMLP(x, y, classes, MLPOptions{Hidden: 8, Epochs: 3, Workers: 3, Seed: 7})
	for i := range one.W1 {
		if d := one.W1[i] - three.W1[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("training depends on the workers: w1[%d] %v vs %v", i, one.W1[i], three.W1[i])
		}
	}
	bad := *mlp
	bad.B1 = bad.B1[:3]
	if err := bad.Validate(); err == nil {
		t.Fatal("a short b1 validated")
	}
}

// TestLinearLogitsExact holds Logits, which sums two classes at a time,
// to the one-class loop bit for bit: each class's sum runs in the same
// order, so heads score exactly as they were evaluated and calibrated.
func TestLinearLogitsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for k := 2; k <= 15; k++ {
		for _, d := range []int{1, 2, 7, 14, 33, 100} {
			l := &Linear{Classes: make([]string, k), Dims: d, W: make([]float32, k*d), B: make([]float32, k)}
			for i := range l.W {
				l.W[i] = float32(rng.NormFloat64())
			}
			for i := range l.B {
				l.B[i] = float32(rng.NormFloat64())
			}
			x := make([]float32, d, d+3) // longer backing: Logits reads d values
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 3)
			}
			got := make([]float32, k)
			l.Logits(x, got)
			for c := range k {
				s := l.B[c]
				for i := range d {
					s += l.W[c*d+i] * x[i]
				}
				if math.Float32bits(got[c]) != math.Float32bits(s) {
					t.Fatalf("k %d, d %d, class %d: %v, the one-class loop %v", k, d, c, got[c], s)
				}
			}
		}
	}
}

// BenchmarkLinearLogits is the default heads' tier-1 head: 14 classes on
// 14 dimensions.
func BenchmarkLinearLogits(b *testing.B) {
	const k, d = 14, 14
	rng := rand.New(rand.NewPCG(1, 2))
	l := &Linear{Classes: make([]string, k), Dims: d, W: make([]float32, k*d), B: make([]float32, k)}
	for i := range l.W {
		l.W[i] = float32(rng.NormFloat64())
	}
	x, out := make([]float32, d), make([]float32, k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for b.Loop() {
		l.Logits(x, out)
	}
}
