package static

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/internal/testenv"
)

// benchText returns English text of about n tokens.
func benchText(b *testing.B, m *Model, n int) string {
	b.Helper()
	const para = "I moved out of my apartment last month and my landlord is refusing to return the security deposit. " +
		"He says the carpet needs replacing because of normal wear and tear after three years, and that I owe him for repainting the walls. " +
		"Is that legal in California, and what can I do to get my money back without going to small claims court? "
	var sb strings.Builder
	for len(m.Tokenizer().Encode(nil, sb.String(), 0)) < n {
		sb.WriteString(para)
	}
	ids := m.Tokenizer().Encode(nil, sb.String(), 0)
	// Cut at a word boundary close to n tokens.
	words := strings.Fields(sb.String())
	text := strings.Join(words[:len(words)*n/len(ids)], " ")
	return text
}

// BenchmarkClassify is tier 1 on the default heads: tokenize, look up,
// average (token and bigram rows), score, top-k. tokens=16000 shows the cap:
// it costs what the capped length does.
func BenchmarkClassify(b *testing.B) {
	_, m := defaultModel(b)
	for _, n := range []int{30, 500, 16000} {
		text := benchText(b, m, n)
		b.Run("tokens="+strconv.Itoa(n), func(b *testing.B) {
			var r classifier.Result
			m.Classify(context.Background(), text, &r)
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				m.Classify(context.Background(), text, &r)
			}
			b.ReportMetric(float64(r.Tokens), "tokens/op")
		})
	}
}

// BenchmarkClassifyReleased is the first Classify after the table's pages
// were released (Model.ReleasePages, when traffic stops): the rows it
// reads fault back in from the page cache. Compare BenchmarkClassify.
func BenchmarkClassifyReleased(b *testing.B) {
	_, m := defaultModel(b)
	text := benchText(b, m, 30)
	var r classifier.Result
	m.Classify(context.Background(), text, &r)
	b.ReportAllocs()
	for b.Loop() {
		m.ReleasePages()
		m.Classify(context.Background(), text, &r)
	}
}

// BenchmarkLoadRSS loads the default tier 1 and reports what it adds to the
// process's resident memory (MiB), and the Go heap it holds.
func BenchmarkLoadRSS(b *testing.B) {
	h, _ := defaultModel(b) // warm: page cache, tokenizer file
	var keep []*Model
	for b.Loop() {
		runtime.GC()
		debug.FreeOSMemory()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		rss0 := vmRSS(b)
		m, err := Load(h, modelsDir())
		if err != nil {
			b.Fatal(err)
		}
		var r classifier.Result
		m.Classify(context.Background(), "warm the pools and the tokenizer's tables: Café naïve 日本語", &r)
		runtime.GC()
		debug.FreeOSMemory()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(vmRSS(b)-rss0)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		keep = append(keep[:0], m)
	}
	runtime.KeepAlive(keep)
}

// BenchmarkLoadRSSDev is BenchmarkLoadRSS split by kind of memory, and
// again after serving: the process's anonymous (heap, stacks) and
// file-backed resident memory added by loading the default tier 1
// (file-load-MiB) and one Classify (anon-MiB, file-MiB), then after
// classifying the first 200 prompts of the subjects dev set (anon-200-MiB,
// file-200-MiB), each measured after a GC and FreeOSMemory, as the gateway
// does when traffic stops. File-backed pages are a mapped table's: clean, shared with the
// page cache, reclaimable under memory pressure; file-released-MiB is
// what stays of them after ReleasePages, as when traffic stops.
func BenchmarkLoadRSSDev(b *testing.B) {
	h, _ := defaultModel(b) // warm: page cache, tokenizer file
	shared := testenv.Shared(b, "datasets/subjects/dev.jsonl")
	dev, err := datasets.ReadJSONL(filepath.Join(shared, "datasets", "subjects", "dev.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	texts := make([]string, 0, 200)
	for _, row := range dev.Rows[:min(200, len(dev.Rows))] {
		texts = append(texts, row.Text)
	}
	settle := func() (anon, file int64) {
		runtime.GC()
		debug.FreeOSMemory()
		return procStatus(b, "RssAnon"), procStatus(b, "RssFile")
	}
	const mib = 1 << 20
	var keep []*Model
	for b.Loop() {
		anon0, file0 := settle()
		m, err := Load(h, modelsDir())
		if err != nil {
			b.Fatal(err)
		}
		_, file := settle()
		b.ReportMetric(float64(file-file0)/mib, "file-load-MiB")
		var r classifier.Result
		m.Classify(context.Background(), "warm the pools and the tokenizer's tables: Café naïve 日本語", &r)
		anon, file := settle()
		b.ReportMetric(float64(anon-anon0)/mib, "anon-MiB")
		b.ReportMetric(float64(file-file0)/mib, "file-MiB")
		for _, t := range texts {
			m.Classify(context.Background(), t, &r)
		}
		anon, file = settle()
		b.ReportMetric(float64(anon-anon0)/mib, "anon-200-MiB")
		b.ReportMetric(float64(file-file0)/mib, "file-200-MiB")
		m.ReleasePages()
		_, file = settle()
		b.ReportMetric(float64(file-file0)/mib, "file-released-MiB")
		keep = append(keep[:0], m)
	}
	runtime.KeepAlive(keep)
}

func vmRSS(b *testing.B) int64 { return procStatus(b, "VmRSS") }

// procStatus is a memory field of /proc/self/status, in bytes.
func procStatus(b *testing.B, field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Skip("no " + field + " in /proc/self/status")
	return 0
}
