package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// clock is a fake clock the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func plain() *bool                       { f := false; return &f }
func tty() *bool                         { t := true; return &t }

func TestPlainLines(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	b := New(&out, "eval: tier 1", 100, Options{Now: c.now, Terminal: plain()})
	for i := 1; i <= 100; i++ {
		c.advance(100 * time.Millisecond) // 10 items a second
		b.Set(int64(i))
	}
	b.Finish()
	want := "eval: tier 1: 50/100 items (50%), 10.0 items/s, about 5s left\n" +
		"eval: tier 1: 100 items in 10s (10.0 items/s)\n"
	if out.String() != want {
		t.Fatalf("plain output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestQuickStepPrintsNothing(t *testing.T) {
	for _, term := range []*bool{plain(), tty()} {
		c := newClock()
		var out bytes.Buffer
		b := New(&out, "eval", 1000, Options{Now: c.now, Terminal: term})
		for i := 1; i <= 1000; i++ {
			c.advance(time.Millisecond)
			b.Add(1)
		}
		b.Finish()
		if out.Len() != 0 {
			t.Fatalf("terminal %v: a 1s step printed %q", *term, out.String())
		}
	}
}

func TestTerminalBar(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	b := New(&out, "train: embedding train.jsonl", 10, Options{Now: c.now, Terminal: tty(), Unit: "texts"})
	c.advance(2 * time.Second)
	b.Set(3)
	if s := out.String(); !strings.Contains(s, "train: embedding train.jsonl") || !strings.Contains(s, "3/10") {
		t.Fatalf("terminal bar: %q, want the label and 3/10", s)
	}
	c.advance(2 * time.Second)
	b.Set(10)
	b.Finish()
	if s := out.String(); !strings.HasSuffix(s, "train: embedding train.jsonl: 10 texts in 4s (2.5 texts/s)\n") {
		t.Fatalf("terminal bar, finished: %q", s)
	}
}

func TestFuncRuns(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	report, finish := Func(&out, Options{Now: c.now, Terminal: plain(), Unit: "texts", Every: time.Second}, "embedding train.jsonl", "embedding dev.jsonl")
	for _, total := range []int{20, 10} {
		for i := 1; i <= total; i++ {
			c.advance(200 * time.Millisecond)
			report(i, total)
		}
	}
	finish()
	got := out.String()
	for _, want := range []string{
		"embedding train.jsonl: 6/20 texts (30%), 5.0 texts/s, about 2.8s left\n",
		"embedding train.jsonl: 16/20 texts (80%), 5.0 texts/s, about 800ms left\n",
		"embedding train.jsonl: 20 texts in 3.8s (5.0 texts/s)\n",
		"embedding dev.jsonl: 6/10 texts (60%), 5.0 texts/s, about 800ms left\n",
		"embedding dev.jsonl: 10 texts in 1.8s (5.0 texts/s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond: "850ms", 2500 * time.Millisecond: "2.5s", 12 * time.Second: "12s",
		125 * time.Second: "2m05s", 62 * time.Minute: "1h02m",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{82_000_000: "82.0 MB", 118_000_000: "118 MB", 950_000: "950 kB", 12: "12 B"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLogKeepsTheBar(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	b := New(&out, "train", 10, Options{Now: c.now, Terminal: tty(), Unit: "epochs"})
	c.advance(2 * time.Second)
	b.Set(4)
	b.Log("train: model 1/1 epoch 4/10 loss 0.5")
	s := out.String()
	i := strings.Index(s, "train: model 1/1 epoch 4/10 loss 0.5\n")
	if i < 0 || !strings.Contains(s[i:], "4/10") {
		t.Fatalf("a line logged under a bar: %q, want the line then the bar again", s)
	}
	var plainOut bytes.Buffer
	p := New(&plainOut, "train", 10, Options{Now: c.now, Terminal: plain()})
	p.Log("a line")
	if plainOut.String() != "a line\n" {
		t.Fatalf("plain Log: %q", plainOut.String())
	}
}

// Workers finishing out of order report done a little below what was
// reported already: the same run goes on.
func TestFuncOutOfOrder(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	report, finish := Func(&out, Options{Now: c.now, Terminal: plain(), Every: time.Second}, "eval: tier 1", "eval: tier 2")
	for _, d := range []int{1, 3, 2, 5, 4, 7, 6, 8, 10, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10} {
		c.advance(500 * time.Millisecond)
		report(d, 10)
	}
	finish()
	if got := out.String(); strings.Count(got, "eval: tier 1: 10 items in") != 1 || strings.Count(got, "eval: tier 2: 10 items in") != 1 || strings.Count(got, " in ") != 2 {
		t.Fatalf("two runs, the first reported out of order:\n%s", got)
	}
}

func TestBytes(t *testing.T) {
	c := newClock()
	var out bytes.Buffer
	b := New(&out, "glove", 100e6, Options{Now: c.now, Terminal: plain(), Bytes: true})
	for range 2 {
		c.advance(3 * time.Second)
		b.Add(20e6)
	}
	b.Set(100e6)
	c.advance(4 * time.Second)
	b.Finish()
	want := "glove: 40.0 MB of 100 MB (40%), 6.7 MB/s, about 9s left\nglove: 100 MB in 10s (10.0 MB/s)\n"
	if out.String() != want {
		t.Fatalf("bytes:\n%s\nwant\n%s", out.String(), want)
	}
	// A Reader counts what goes through it.
	out.Reset()
	r := New(&out, "read", 10, Options{Now: c.now, Terminal: plain(), Quiet: time.Nanosecond, Every: time.Nanosecond})
	c.advance(time.Second)
	if n, _ := io.Copy(io.Discard, r.Reader(strings.NewReader("0123456"))); n != 7 {
		t.Fatalf("read %d", n)
	}
	c.advance(time.Second)
	r.Finish()
	if !strings.Contains(out.String(), "read: 7 items in 2s (3.5 items/s)") {
		t.Fatalf("reader: %q", out.String())
	}
}
