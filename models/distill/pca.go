package distill

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
)

// PCA projects vectors (n rows of equal length D) onto their first dims
// principal components (dims is capped at D): proj[i][k] is (vectors[i] -
// mean) · component k. explained[k] is the fraction of the total variance
// that component k carries. Components are the eigenvectors of the sample
// covariance, found by Householder tridiagonalisation and the implicit QL
// algorithm (the EISPACK tred2/tql2 pair), in order of decreasing variance,
// each with its largest-magnitude coordinate positive: the result is
// deterministic. The covariance is computed in float64, in parallel but in a
// fixed order. Cost: O(n*D^2/cores + D^3): about 4 s for n = 30k, D = 384
// on 2 cores (the covariance dominates; D = 768 costs about four times as
// much).
// It panics if rows differ in length; empty input or dims <= 0 gives nils.
func PCA(vectors [][]float32, dims int) (proj [][]float32, explained []float64) {
	mean, comps, explained := pcaBasis(vectors, dims)
	if comps == nil {
		return nil, nil
	}
	D, k := len(mean), len(comps)
	flat := make([]float32, len(vectors)*k)
	proj = make([][]float32, len(vectors))
	c := make([]float64, D)
	for i, v := range vectors {
		for j := range c {
			c[j] = float64(v[j]) - mean[j]
		}
		p := flat[i*k : i*k+k : i*k+k]
		for m, comp := range comps {
			var s float64
			for j, x := range comp {
				s += x * c[j]
			}
			p[m] = float32(s)
		}
		proj[i] = p
	}
	return proj, explained
}

// pcaBasis returns the mean, the first dims principal components (unit
// vectors) and the fraction of variance of each.
func pcaBasis(vectors [][]float32, dims int) (mean []float64, comps [][]float64, explained []float64) {
	n := len(vectors)
	if n == 0 || dims <= 0 || len(vectors[0]) == 0 {
		return nil, nil, nil
	}
	D := len(vectors[0])
	dims = min(dims, D)
	mean = make([]float64, D)
	for i, v := range vectors {
		if len(v) != D {
			panic(fmt.Sprintf("models: PCA: row %d has %d values, row 0 has %d", i, len(v), D))
		}
		for j, x := range v {
			mean[j] += float64(x)
		}
	}
	for j := range mean {
		mean[j] /= float64(n)
	}
	cov := covariance(vectors, mean)
	vals, vecs := symmetricEigen(cov)
	total := 0.0
	for _, v := range vals {
		total += max(v, 0)
	}
	order := make([]int, D)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return vals[order[a]] > vals[order[b]] })
	comps = make([][]float64, dims)
	explained = make([]float64, dims)
	for k := range dims {
		col := order[k]
		c := make([]float64, D)
		best := 0
		for j := range D {
			c[j] = vecs[j][col]
			if math.Abs(c[j]) > math.Abs(c[best]) {
				best = j
			}
		}
		if c[best] < 0 {
			for j := range c {
				c[j] = -c[j]
			}
		}
		comps[k] = c
		if total > 0 {
			explained[k] = max(vals[col], 0) / total
		}
	}
	return mean, comps, explained
}

// covariance is the D×D sample covariance (divided by n-1, or 1 for one
// row). Workers own fixed rows of the matrix and each sums over the samples
// in order, so the result does not depend on scheduling.
func covariance(vectors [][]float32, mean []float64) [][]float64 {
	D, n := len(mean), len(vectors)
	cov := make([][]float64, D)
	for i := range cov {
		cov[i] = make([]float64, D)
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), D))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := make([]float64, D)
			for _, v := range vectors {
				for j, x := range v {
					c[j] = float64(x) - mean[j]
				}
				for i := w; i < D; i += workers {
					ci := c[i]
					row := cov[i][i:]
					for j, x := range c[i:] {
						row[j] += ci * x
					}
				}
			}
		}()
	}
	wg.Wait()
	div := float64(max(n-1, 1))
	for i := range D {
		for j := i; j < D; j++ {
			cov[i][j] /= div
			cov[j][i] = cov[i][j]
		}
	}
	return cov
}

// symmetricEigen returns the eigenvalues of the symmetric matrix a and the
// eigenvectors as the columns of v (v[k][i] is coordinate k of vector i).
// It is the tred2/tql2 pair of EISPACK as given in JAMA (public domain);
// a is not modified.
func symmetricEigen(a [][]float64) (d []float64, v [][]float64) {
	n := len(a)
	v = make([][]float64, n)
	for i := range v {
		v[i] = append([]float64(nil), a[i]...)
	}
	d = make([]float64, n)
	e := make([]float64, n)
	tred2(v, d, e)
	// tql2 rotates pairs of columns; on the transpose those are rows,
	// contiguous in memory: several times faster for n in the hundreds.
	vt := transpose(v)
	tql2(vt, d, e)
	return d, transpose(vt)
}

func transpose(a [][]float64) [][]float64 {
	n := len(a)
	flat := make([]float64, n*n)
	t := make([][]float64, n)
	for i := range t {
		t[i] = flat[i*n : i*n+n : i*n+n]
	}
	for i, row := range a {
		for j, x := range row {
			t[j][i] = x
		}
	}
	return t
}

// tred2 reduces v (symmetric) to tridiagonal form by Householder
// transformations: diagonal in d, subdiagonal in e[1:], and v becomes the
// accumulated orthogonal transformation.
func tred2(v [][]float64, d, e []float64) {
	n := len(d)
	copy(d, v[n-1])
	for i := n - 1; i > 0; i-- {
		scale, h := 0.0, 0.0
		for k := range i {
			scale += math.Abs(d[k])
		}
		if scale == 0 {
			e[i] = d[i-1]
			for j := range i {
				d[j] = v[i-1][j]
				v[i][j] = 0
				v[j][i] = 0
			}
		} else {
			for k := range i {
				d[k] /= scale
				h += d[k] * d[k]
			}
			f := d[i-1]
			g := math.Sqrt(h)
			if f > 0 {
				g = -g
			}
			e[i] = scale * g
			h -= f * g
			d[i-1] = f - g
			for j := range i {
				e[j] = 0
			}
			for j := range i {
				f = d[j]
				v[j][i] = f
				g = e[j] + v[j][j]*f
				for k := j + 1; k <= i-1; k++ {
					g += v[k][j] * d[k]
					e[k] += v[k][j] * f
				}
				e[j] = g
			}
			f = 0
			for j := range i {
				e[j] /= h
				f += e[j] * d[j]
			}
			hh := f / (h + h)
			for j := range i {
				e[j] -= hh * d[j]
			}
			for j := range i {
				f = d[j]
				g = e[j]
				for k := j; k <= i-1; k++ {
					v[k][j] -= f*e[k] + g*d[k]
				}
				d[j] = v[i-1][j]
				v[i][j] = 0
			}
		}
		d[i] = h
	}
	for i := 0; i < n-1; i++ {
		v[n-1][i] = v[i][i]
		v[i][i] = 1
		h := d[i+1]
		if h != 0 {
			for k := 0; k <= i; k++ {
				d[k] = v[k][i+1] / h
			}
			for j := 0; j <= i; j++ {
				g := 0.0
				for k := 0; k <= i; k++ {
					g += v[k][i+1] * v[k][j]
				}
				for k := 0; k <= i; k++ {
					v[k][j] -= g * d[k]
				}
			}
		}
		for k := 0; k <= i; k++ {
			v[k][i+1] = 0
		}
	}
	for j := range n {
		d[j] = v[n-1][j]
		v[n-1][j] = 0
	}
	v[n-1][n-1] = 1
	e[0] = 0
}

// tql2 finds the eigenvalues (into d) and eigenvectors (rows of vt) of the
// tridiagonal matrix from tred2 by the implicit QL method; vt is the
// transpose of tred2's transformation.
func tql2(vt [][]float64, d, e []float64) {
	n := len(d)
	for i := 1; i < n; i++ {
		e[i-1] = e[i]
	}
	e[n-1] = 0
	f, tst1 := 0.0, 0.0
	const eps = 0x1p-52
	for l := range n {
		tst1 = max(tst1, math.Abs(d[l])+math.Abs(e[l]))
		m := l
		for m < n && math.Abs(e[m]) > eps*tst1 {
			m++
		}
		if m == n {
			m = n - 1 // e[n-1] is 0: not reached, but keep m in range
		}
		if m > l {
			for iter := 0; iter < 64; iter++ {
				g := d[l]
				p := (d[l+1] - g) / (2 * e[l])
				r := math.Hypot(p, 1)
				if p < 0 {
					r = -r
				}
				d[l] = e[l] / (p + r)
				d[l+1] = e[l] * (p + r)
				dl1 := d[l+1]
				h := g - d[l]
				for i := l + 2; i < n; i++ {
					d[i] -= h
				}
				f += h
				p = d[m]
				c, c2, c3 := 1.0, 1.0, 1.0
				el1 := e[l+1]
				s, s2 := 0.0, 0.0
				for i := m - 1; i >= l; i-- {
					c3 = c2
					c2 = c
					s2 = s
					g = c * e[i]
					h = c * p
					r = math.Hypot(p, e[i])
					e[i+1] = s * r
					s = e[i] / r
					c = p / r
					p = c*d[i] - s*g
					d[i+1] = h + s*(c*g+s*d[i])
					a, b := vt[i][:n], vt[i+1][:n]
					for k, x := range b {
						y := a[k]
						b[k] = s*y + c*x
						a[k] = c*y - s*x
					}
				}
				p = -s * s2 * c3 * el1 * e[l] / dl1
				e[l] = s * p
				d[l] = c * p
				if math.Abs(e[l]) <= eps*tst1 {
					break
				}
			}
		}
		d[l] += f
		e[l] = 0
	}
}
