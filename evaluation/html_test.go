package evaluation

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// -update copies the render test's screenshot to
// testdata/report-screenshot.png for a reviewer to look at. The flag is
// defined here unless another test file of the package already did.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "write testdata/report-screenshot.png from the HTML render test")
	}
}

func htmlUpdating() bool {
	f := flag.Lookup("update")
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	b, _ := g.Get().(bool)
	return b
}

var htmlTestClasses = []string{
	"biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
	"history", "law", "math", "other", "philosophy", "physics", "psychology",
}

// htmlTestReport builds a realistic report: per-class figures derived from
// a confusion matrix, 15 reliability bins, curves, latency, reasons, a
// comparison and three slices by realism.
func htmlTestReport(classes []string, n int, seed uint64) *Report {
	rng := rand.New(rand.NewPCG(seed, 7))
	k := len(classes)
	counts := make([][]int, k)
	for i := range counts {
		counts[i] = make([]int, k)
	}
	// A skill per class: most items land on the diagonal, the rest on a
	// few neighbours (and "other").
	skill := make([]float64, k)
	for i := range skill {
		skill[i] = 0.45 + 0.5*rng.Float64()
	}
	for range n {
		i := rng.IntN(k)
		if rng.Float64() < 0.3 { // some classes are much larger
			i = i % max(k/3, 1)
		}
		j := i
		if rng.Float64() > skill[i] {
			switch u := rng.Float64(); {
			case u < 0.45:
				j = (i + 1) % k
			case u < 0.65:
				j = (i + k - 1) % k
			default:
				j = rng.IntN(k)
			}
		}
		counts[i][j]++
	}
	r := &Report{
		Spec: "tier1 of models/heads/subjects", Data: "datasets/mmlu-subjects.test.jsonl",
		DataSHA256: "9f2c4e1ab07d3366e58f0c1b2a9d4e7f6a5b3c2d1e0f9a8b7c6d5e4f3a2b1c0d",
		Mode:       "tier", N: n,
		PerClass:  map[string]ClassReport{},
		Confusion: Confusion{Labels: classes, Counts: counts},
		Curves:    map[string][]CurvePoint{},
	}
	correct := 0
	var sp, sr, sf float64
	for c := range k {
		support, pred := 0, 0
		for j := range k {
			support += counts[c][j]
			pred += counts[j][c]
		}
		tp := counts[c][c]
		correct += tp
		cr := ClassReport{Support: support, Predicted: pred}
		if pred > 0 {
			cr.Precision = float64(tp) / float64(pred)
		}
		if support > 0 {
			cr.Recall = float64(tp) / float64(support)
		}
		if cr.Precision+cr.Recall > 0 {
			cr.F1 = 2 * cr.Precision * cr.Recall / (cr.Precision + cr.Recall)
		}
		r.PerClass[classes[c]] = cr
		sp, sr, sf = sp+cr.Precision, sr+cr.Recall, sf+cr.F1
		// A precision–coverage curve that rises (precision) and falls
		// (coverage) with the floor; some classes never reach 0.9.
		var pts []CurvePoint
		for _, f := range []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99} {
			p := cr.Precision + (1-cr.Precision)*math.Pow(f, 1.5)*skill[c]
			cov := cr.Recall * (1 - math.Pow(f, 2.2))
			cnt := int(float64(pred) * (1 - math.Pow(f, 1.8)))
			if cnt == 0 {
				p = 0
			}
			pts = append(pts, CurvePoint{Floor: f, Precision: p, Coverage: cov, Count: cnt})
		}
		r.Curves[classes[c]] = pts
	}
	r.Accuracy = float64(correct) / float64(max(n, 1))
	r.MacroPrecision, r.MacroRecall, r.MacroF1 = sp/float64(k), sr/float64(k), sf/float64(k)
	r.MicroPrecision, r.MicroRecall, r.MicroF1 = r.Accuracy, r.Accuracy, r.Accuracy
	r.Coverage = 0.78
	r.EscalationRate = 0.191

	// 15 equal-width bins, most mass at high confidence, a little
	// overconfidence.
	var ece float64
	for b := range 15 {
		lo, hi := float64(b)/15, float64(b+1)/15
		cnt := int(float64(n) * 0.012 * math.Exp(float64(b)/3.2))
		if b < 2 {
			cnt = 0
		}
		conf := (lo + hi) / 2
		acc := math.Max(0, conf-0.06+0.04*rng.Float64())
		r.Reliability = append(r.Reliability, Bin{Lo: lo, Hi: hi, Count: cnt, Confidence: conf, Accuracy: acc})
		ece += math.Abs(acc-conf) * float64(cnt)
	}
	total := 0
	for _, b := range r.Reliability {
		total += b.Count
	}
	r.ECE = ece / float64(max(total, 1))

	r.Latency = map[string]Percentiles{
		"tier1":    {P50: 182, P90: 431, P99: 1930, Count: n},
		"decision": {P50: 240, P90: 9100, P99: 48200, Count: n},
	}
	r.Reasons = map[string]int{
		"tier1_confident": n * 62 / 100, "below_floor": n * 15 / 100, "class_requires_tier2": n * 4 / 100,
		"default": n * 17 / 100, "tier2_timeout": n * 2 / 100,
	}
	r.Compare = &TierComparison{N: n * 21 / 100, Tier1Acc: 0.612, Tier2Acc: 0.804, Agreement: 0.701, Tier1Only: n * 2 / 100, Tier2Only: n * 6 / 100}
	r.By = "realism"
	r.Slices = map[string]*Report{
		"synthetic":   {N: n / 2, Accuracy: 0.912, MacroF1: 0.884, Coverage: 0.83, ECE: 0.031},
		"paraphrased": {N: n / 3, Accuracy: 0.801, MacroF1: 0.772, Coverage: 0.76, ECE: 0.058},
		"real-world":  {N: n - n/2 - n/3, Accuracy: 0.655, MacroF1: 0.611, Coverage: 0.69, ECE: 0.104},
	}
	return r
}

func htmlRender(t *testing.T, r *Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, r); err != nil {
		t.Fatalf("WriteHTML: %v", err)
	}
	return buf.String()
}

func TestWriteHTMLRealistic(t *testing.T) {
	r := htmlTestReport(htmlTestClasses, 4000, 1)
	page := htmlRender(t, r)
	checkPage(t, page)
	for _, c := range htmlTestClasses {
		if !strings.Contains(page, ">"+c+"<") {
			t.Errorf("class %q missing", c)
		}
	}
	for _, want := range []string{
		r.Spec, "sha256 9f2c4e1ab07d", `class="heatmap"`, `class="reliability"`, `class="curve"`, `class="latency"`,
		`class="reasons"`, `class="compare"`, `class="slices"`, "ECE " + htmlRate(r.ECE), htmlRate(r.Accuracy),
		"real-world", "by realism", `class="weak"`, "log scale",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// One small chart per class.
	if got := strings.Count(page, `class="curve"`); got != len(htmlTestClasses) {
		t.Errorf("%d curve charts, want %d", got, len(htmlTestClasses))
	}
	// Counts are written in the cells of a 14-label heatmap.
	if !strings.Contains(page, `pointer-events="none"`) {
		t.Errorf("no counts written in the heatmap's cells")
	}
	// Rendering is deterministic.
	if again := htmlRender(t, r); again != page {
		t.Errorf("two renders of the same report differ")
	}
}

func TestWriteHTMLEscapes(t *testing.T) {
	const evil = "<script>alert(1)</script>"
	classes := append(append([]string(nil), htmlTestClasses...), evil)
	r := htmlTestReport(classes, 3000, 2)
	r.Spec = `rules "<b>bold</b>" & co`
	r.By = `<i>by</i>`
	r.Slices[`<img onerror=alert(2)>`] = &Report{N: 3, Accuracy: 1}
	r.Reasons[evil] = 5
	r.Latency[evil] = Percentiles{P50: 1, P90: 2, P99: 3, Count: 3}
	page := htmlRender(t, r)
	checkPage(t, page)
	for _, raw := range []string{evil, "<b>bold</b>", "<i>by</i>", "<img", "<script"} {
		if strings.Contains(page, raw) {
			t.Errorf("page contains raw %q", raw)
		}
	}
	if n := strings.Count(page, "&lt;script&gt;alert(1)&lt;/script&gt;"); n < 5 {
		t.Errorf("escaped class name appears %d times, want it in the table, heatmap, curves, reasons and latency", n)
	}
	if !strings.Contains(page, "rules &#34;&lt;b&gt;bold&lt;/b&gt;&#34; &amp; co") {
		t.Errorf("spec not escaped as text")
	}
}

func TestWriteHTMLDegenerate(t *testing.T) {
	for name, r := range map[string]*Report{
		"nil":   nil,
		"zero":  {},
		"empty": {Spec: "tier1 of nothing", Mode: "tier", N: 0, Confusion: Confusion{Labels: []string{"a", "b"}, Counts: [][]int{{0, 0}, {0, 0}}}, Reliability: make([]Bin, 15), PerClass: map[string]ClassReport{"a": {}, "b": {}}, Curves: map[string][]CurvePoint{"a": nil, "b": {{Floor: 0}, {Floor: 0.5}}}, Latency: map[string]Percentiles{"tier1": {}}, Reasons: map[string]int{}, Slices: map[string]*Report{"x": nil}},
		"undefined": {
			Spec: "undefined numbers", N: 3, Accuracy: math.NaN(), MacroF1: math.Inf(1), ECE: math.Inf(-1),
			PerClass:    map[string]ClassReport{"a": {Precision: math.NaN(), F1: math.NaN(), Support: 3}},
			Confusion:   Confusion{Labels: []string{"a", "b", "c"}, Counts: [][]int{{3}, nil}}, // ragged
			Reliability: []Bin{{Lo: 0, Hi: 0.5, Count: 2, Confidence: math.NaN(), Accuracy: math.Inf(1)}, {Lo: 0.5, Hi: 0.5, Count: 1}},
			Curves:      map[string][]CurvePoint{"a": {{Floor: math.NaN(), Precision: math.NaN(), Coverage: math.Inf(1), Count: 1}, {Floor: 2, Precision: 1, Count: 1}}},
			Latency:     map[string]Percentiles{"tier1": {P50: math.NaN(), P90: math.Inf(1), P99: -4, Count: 3}, "tier2": {P50: 5, P90: 5, P99: 5, Count: 1}},
			Reasons:     map[string]int{"below_floor": 0, "default": -2},
			Compare:     &TierComparison{Tier1Acc: math.NaN(), Tier2Acc: 2},
			By:          "realism",
			Slices:      map[string]*Report{"10": {Accuracy: math.NaN()}, "9": {}, "b": {N: 1, Accuracy: 1}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			page := htmlRender(t, r)
			checkPage(t, page)
			if r == nil || r.N == 0 {
				if !strings.Contains(page, "No items were evaluated") {
					t.Errorf("empty report not said to be empty")
				}
				for _, absent := range []string{`id="confusion"`, `id="reliability"`, `id="reasons"`, `id="slices"`, `id="compare"`} {
					if strings.Contains(page, absent) {
						t.Errorf("empty section %s rendered", absent)
					}
				}
			}
		})
	}
}

// TestWriteHTMLManyLabels: 150 labels still render, without cell text.
func TestWriteHTMLManyLabels(t *testing.T) {
	var classes []string
	for i := range 150 {
		classes = append(classes, "class-"+strconv.Itoa(i))
	}
	r := htmlTestReport(classes, 20000, 3)
	page := htmlRender(t, r)
	checkPage(t, page)
	i := strings.Index(page, `class="heatmap"`)
	j := strings.Index(page[i:], "</svg>")
	heat := page[i : i+j]
	if strings.Contains(heat, `pointer-events="none"`) {
		t.Errorf("150-label heatmap writes counts in its cells")
	}
	if !strings.Contains(heat, "<rect") {
		t.Errorf("150-label heatmap has no cells")
	}
	if len(page) > 8<<20 {
		t.Errorf("page is %d bytes", len(page))
	}
}

// TestWriteHTMLChromium renders the page in headless Chromium: a
// screenshot that is 1280 wide and not blank, and a DOM that holds the
// heatmap and the headline accuracy. -update keeps the screenshot in
// testdata/ for a reviewer.
func TestWriteHTMLChromium(t *testing.T) {
	const bin = "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("chromium is not installed (scripts/install-chromium.sh installs it): " + err.Error())
	}
	r := htmlTestReport(htmlTestClasses, 4000, 1)
	r.Robustness = htmlTestRobustness(htmlTestClasses)
	dir := t.TempDir()
	pagePath := filepath.Join(dir, "report.html")
	if err := os.WriteFile(pagePath, []byte(htmlRender(t, r)), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		profile, err := os.MkdirTemp(dir, "profile")
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{
			"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--disable-quic", "--hide-scrollbars",
			"--user-data-dir=" + profile,
		}, extra...)
		args = append(args, "file://"+pagePath)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, htmlTail(stderr.String(), 2000))
		}
		return stdout.Bytes()
	}

	shot := filepath.Join(dir, "shot.png")
	run("--screenshot="+shot, "--window-size=1280,3000")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w != 1280 {
		t.Errorf("screenshot is %d wide, want 1280", w)
	}
	colours, nonWhite := htmlImageStats(img)
	t.Logf("screenshot %v: %d distinct colours, %.1f%% non-white", img.Bounds().Size(), colours, nonWhite*100)
	if colours < 64 || nonWhite < 0.05 {
		t.Errorf("screenshot looks blank: %d distinct colours, %.1f%% non-white", colours, nonWhite*100)
	}

	dom := string(run("--dump-dom", "--virtual-time-budget=2000"))
	for _, want := range []string{`class="heatmap"`, "<rect", `id="confusion"`, `id="robustness"`, ">" + htmlRate(r.Accuracy) + "<", "computer science"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}

	if htmlUpdating() {
		data, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "report-screenshot.png"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote testdata/report-screenshot.png")
	}
}

// htmlImageStats counts distinct colours (on a sample grid) and the share
// of pixels that are not near-white.
func htmlImageStats(img image.Image) (int, float64) {
	b := img.Bounds()
	seen := map[[3]uint32]bool{}
	total, dark := 0, 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			total++
			if r>>8 < 235 || g>>8 < 235 || bl>>8 < 235 {
				dark++
			}
		}
	}
	return len(seen), float64(dark) / float64(max(total, 1))
}

func htmlTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…%s", s[len(s)-n:])
}
