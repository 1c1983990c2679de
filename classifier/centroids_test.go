package classifier

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// Centroids are each class's mean direction; the distance is 1 − the
// cosine to one of them, whatever the text's length.
func TestCentroids(t *testing.T) {
	feats := [][]float32{{2, 0}, {0, 3}, {1, 1}, {0, 0}} // the zero vector counts for nothing
	c, err := NewCentroids(feats, []int{0, 0, 1, 1}, 2, 2, CentroidRowsAll)
	if err != nil {
		t.Fatal(err)
	}
	r := float32(1 / math.Sqrt2)
	if !close32(c.W[0], r) || !close32(c.W[1], r) || !close32(c.W[2], r) || !close32(c.W[3], r) {
		t.Fatalf("centroids %v, want every value 1/√2", c.W)
	}
	if err := c.Validate(2, 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		feat []float32
		want float32
	}{
		{[]float32{5, 5}, 0},
		{[]float32{1, 0}, 1 - r},
		{[]float32{-1, -1}, 2},
		{[]float32{0, 0}, 1},
	} {
		if got := c.Distance(tc.feat, 1); !close32(got, tc.want) {
			t.Errorf("Distance(%v) = %v, want %v", tc.feat, got, tc.want)
		}
	}
	if _, err := NewCentroids(feats[:2], []int{0, 0}, 2, 2, CentroidRowsAll); err == nil {
		t.Error("a class without rows got a centroid")
	}
}

func TestCentroidsDistanceAllocs(t *testing.T) {
	c := &Centroids{Dims: 2, W: []float32{1, 0, 0, 1}, Rows: CentroidRowsAll}
	feat := []float32{0.3, 0.4}
	if n := testing.AllocsPerRun(100, func() { c.Distance(feat, 1) }); n != 0 {
		t.Errorf("Distance allocates %v times", n)
	}
}

func close32(a, b float32) bool { return math.Abs(float64(a-b)) < 1e-6 }

// The artifact checks its centroids: one unit row per class of the
// head's dims, rows named, tier 1 only.
func TestHeadsValidateCentroids(t *testing.T) {
	head := Linear{Kind: "softmax", Classes: []string{"a", "b"}, Dims: 2, W: make([]float32, 4), B: make([]float32, 2)}
	good := func() *Centroids { return &Centroids{Dims: 2, W: []float32{1, 0, 0, 1}, Rows: CentroidRowsUser} }
	h := &Heads{Format: HeadsFormat, Name: "t", Classes: []string{"a", "b"}, Tier1: &Tier{Head: head, Centroids: good()}}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := LoadHeads(dir)
	if err != nil || back.Tier1.Centroids == nil || back.Tier1.Centroids.W[3] != 1 || back.Tier1.Centroids.Rows != CentroidRowsUser {
		t.Fatalf("LoadHeads after Save: %v, %+v", err, back)
	}
	for _, tc := range []struct {
		name string
		bad  func(h *Heads)
		want string
	}{
		{"dims", func(h *Heads) { h.Tier1.Centroids.Dims = 3 }, "centroids: dims 3, the head's 2"},
		{"short", func(h *Heads) { h.Tier1.Centroids.W = h.Tier1.Centroids.W[:3] }, "centroids: 3 values, want 2 classes x 2 dims"},
		{"not unit", func(h *Heads) { h.Tier1.Centroids.W[0] = 2 }, "centroids: class 0 has length 2.0000, want 1"},
		{"not finite", func(h *Heads) { h.Tier1.Centroids.W[1] = float32(math.NaN()) }, "centroids: a non-finite value"},
		{"rows", func(h *Heads) { h.Tier1.Centroids.Rows = "some" }, `centroids: rows "some"`},
		{"tier 2", func(h *Heads) { h.Tier2 = &Tier{Head: head, Centroids: good()} }, "tier2: centroids are tier 1's only"},
	} {
		c := *h
		t1 := *h.Tier1
		t1.Centroids = good()
		c.Tier1 = &t1
		tc.bad(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	// An artifact without centroids stays valid.
	h.Tier1.Centroids = nil
	if err := h.Save(filepath.Join(dir, "none")); err != nil {
		t.Fatal(err)
	}
}
