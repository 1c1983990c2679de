package distill

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Synthetic data along known orthogonal axes with known variances: PCA
// finds the axes, in order, with the right variance fractions.
func TestPCAKnownAxes(t *testing.T) {
	const D, n = 6, 20000
	rng := rand.New(rand.NewPCG(3, 4))
	// An orthonormal basis: Gram-Schmidt on random vectors.
	axes := make([][]float64, D)
	for i := range axes {
		v := make([]float64, D)
		for j := range v {
			v[j] = rng.NormFloat64()
		}
		for _, a := range axes[:i] {
			d := dot(v, a)
			for j := range v {
				v[j] -= d * a[j]
			}
		}
		norm := math.Sqrt(dot(v, v))
		for j := range v {
			v[j] /= norm
		}
		axes[i] = v
	}
	sd := []float64{10, 5, 2, 1, 0.5, 0.1}
	offset := []float64{3, -1, 4, 1, -5, 9}
	data := make([][]float32, n)
	for i := range data {
		x := slices.Clone(offset)
		for k, a := range axes {
			c := rng.NormFloat64() * sd[k]
			for j := range x {
				x[j] += c * a[j]
			}
		}
		data[i] = make([]float32, D)
		for j := range x {
			data[i][j] = float32(x[j])
		}
	}
	proj, explained := PCA(data, 3)
	if len(proj) != n || len(proj[0]) != 3 || len(explained) != 3 {
		t.Fatalf("shapes %d×%d, %d", len(proj), len(proj[0]), len(explained))
	}
	total := 0.0
	for _, s := range sd {
		total += s * s
	}
	_, comps, _ := pcaBasis(data, 3)
	for k := range 3 {
		if c := math.Abs(dot(comps[k], axes[k])); c < 0.999 {
			t.Errorf("component %d: |cos| with axis %d = %v", k, k, c)
		}
		if want := sd[k] * sd[k] / total; math.Abs(explained[k]-want) > 0.03*want {
			t.Errorf("explained[%d] = %v, want about %v", k, explained[k], want)
		}
		var mean, sq float64
		for _, p := range proj {
			mean += float64(p[k])
		}
		mean /= n
		for _, p := range proj {
			sq += (float64(p[k]) - mean) * (float64(p[k]) - mean)
		}
		if sdk := math.Sqrt(sq / (n - 1)); math.Abs(sdk-sd[k]) > 0.03*sd[k] || math.Abs(mean) > 1e-3*sd[k] {
			t.Errorf("projection %d: mean %v sd %v, want 0 and %v", k, mean, sdk, sd[k])
		}
	}
	// Deterministic, including signs.
	proj2, explained2 := PCA(data, 3)
	for i := range proj {
		if !slices.Equal(proj[i], proj2[i]) {
			t.Fatal("PCA is not deterministic")
		}
	}
	if !slices.Equal(explained, explained2) {
		t.Fatal("explained variance is not deterministic")
	}
	if p, e := PCA(data, 50); len(p[0]) != D || len(e) != D {
		t.Fatalf("dims beyond D: %d, %d", len(p[0]), len(e))
	}
	if p, e := PCA(nil, 3); p != nil || e != nil {
		t.Fatal("empty input")
	}
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// The eigen-decomposition of a random symmetric matrix: A v = λ v and the
// vectors are orthonormal.
func TestSymmetricEigen(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 7, 40} {
		a := make([][]float64, n)
		for i := range a {
			a[i] = make([]float64, n)
		}
		for i := range n {
			for j := 0; j <= i; j++ {
				x := rng.NormFloat64()
				a[i][j], a[j][i] = x, x
			}
		}
		d, v := symmetricEigen(a)
		for k := range n {
			for i := range n {
				av := 0.0
				for j := range n {
					av += a[i][j] * v[j][k]
				}
				if math.Abs(av-d[k]*v[i][k]) > 1e-9 {
					t.Fatalf("n=%d: (A v)[%d] = %v, λ v = %v", n, i, av, d[k]*v[i][k])
				}
			}
			for l := range n {
				s := 0.0
				for i := range n {
					s += v[i][k] * v[i][l]
				}
				want := 0.0
				if k == l {
					want = 1
				}
				if math.Abs(s-want) > 1e-9 {
					t.Fatalf("n=%d: v%d·v%d = %v", n, k, l, s)
				}
			}
		}
	}
}

// BenchmarkPCA is the distill projection's size: 30k vocabulary vectors of
// a 384-dimensional teacher to 256 dimensions.
func BenchmarkPCA(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	data := make([][]float32, 30522)
	for i := range data {
		data[i] = make([]float32, 384)
		for j := range data[i] {
			data[i][j] = float32(rng.NormFloat64()) * float32(j%7+1)
		}
	}
	for b.Loop() {
		PCA(data, 256)
	}
}
