package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Options tune a Bar. The zero value is ready to use.
type Options struct {
	// Unit names what is counted ("items", "texts", "epochs"). Default
	// "items".
	Unit string
	// Bytes counts bytes: figures are sizes ("45.2 MB of 118 MB, 6.1
	// MB/s"), and Unit is not used.
	Bytes bool
	// Every is the time between two plain lines. Default 5s.
	Every time.Duration
	// Quiet is how long a step runs before anything is shown: a step that
	// ends sooner prints nothing. Default 1s.
	Quiet time.Duration
	// Terminal, when set, says whether the writer is a terminal instead
	// of asking it.
	Terminal *bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Bar is the progress of one step of a known number of units.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	o        Options
	total    int64
	done     int64
	base     int64 // units done when the bar started (Func's first report)
	start    time.Time
	last     time.Time // of the last plain line
	shown    bool      // something was printed
	terminal bool
	bar      *progressbar.ProgressBar // on a terminal
	finished bool
}

// New starts a bar for a step of total units, labelled ("eval: tier 1"),
// drawing on w.
func New(w io.Writer, label string, total int64, o Options) *Bar {
	if o.Unit == "" {
		o.Unit = "items"
	}
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	b := &Bar{w: w, label: label, o: o, total: total, start: o.Now()}
	b.last = b.start
	if o.Terminal != nil {
		b.terminal = *o.Terminal
	} else {
		b.terminal = IsTerminal(w)
	}
	if b.terminal {
		// Made now, drawn from the first report after Quiet: its rate and
		// time left count from the step's start.
		b.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(label), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(o.Unit), progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish(), progressbar.OptionShowBytes(o.Bytes))
		b.bar.StartWithoutRender()
	}
	return b
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Add counts n more units done.
func (b *Bar) Add(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.set(b.done + n)
}

// Set says how many units are done.
func (b *Bar) Set(done int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.set(done)
}

func (b *Bar) set(done int64) {
	if b.finished {
		return
	}
	b.done = min(done, b.total)
	now := b.o.Now()
	if now.Sub(b.start) < b.o.Quiet && b.done < b.total {
		return
	}
	if b.terminal {
		if !b.shown {
			if b.done >= b.total {
				return // done before the bar was worth showing
			}
			b.shown = true
		} else if now.Sub(b.last) < 100*time.Millisecond && b.done < b.total {
			return // at most ten draws a second
		}
		b.last = now
		_ = b.bar.Set64(b.done)
		return
	}
	if now.Sub(b.last) >= b.o.Every && b.done < b.total {
		b.last = now
		b.shown = true
		fmt.Fprintf(b.w, "%s: %s\n", b.label, b.figures(now))
	}
}

// Log prints line (without its newline) as a line of its own: on a
// terminal the bar is cleared, the line printed, and the bar drawn again
// below it.
func (b *Bar) Log(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	drawn := b.terminal && b.shown && !b.finished
	if drawn {
		_ = b.bar.Clear()
	}
	fmt.Fprintln(b.w, line)
	if drawn {
		_ = b.bar.Set64(b.done)
	}
}

// figures is "1200/4472 items (27%), 410 items/s, about 8s left".
func (b *Bar) figures(now time.Time) string {
	el := now.Sub(b.start)
	s := fmt.Sprintf("%d/%d %s (%d%%)", b.done, b.total, b.o.Unit, 100*b.done/max(b.total, 1))
	if b.o.Bytes {
		s = fmt.Sprintf("%s of %s (%d%%)", Size(b.done), Size(b.total), 100*b.done/max(b.total, 1))
	}
	if el <= 0 || b.done <= b.base {
		return s
	}
	rate := float64(b.done-b.base) / el.Seconds()
	s += ", " + b.rate(rate)
	if left := b.total - b.done; left > 0 {
		s += ", about " + Duration(time.Duration(float64(left)/rate*float64(time.Second))) + " left"
	}
	return s
}

// Finish ends the step. When anything was shown, it says how long the
// step took: "eval: tier 1: 4472 items in 11s (410 items/s)".
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	if b.bar != nil && b.shown {
		_ = b.bar.Finish() // clears the bar
	}
	now := b.o.Now()
	el := now.Sub(b.start)
	if !b.shown && el < b.o.Every {
		return
	}
	s := fmt.Sprintf("%s: %d %s in %s", b.label, b.done, b.o.Unit, Duration(el))
	if b.o.Bytes {
		s = fmt.Sprintf("%s: %s in %s", b.label, Size(b.done), Duration(el))
	}
	if el > 0 && b.done > b.base {
		s += " (" + b.rate(float64(b.done-b.base)/el.Seconds()) + ")"
	}
	fmt.Fprintln(b.w, s)
}

// Func is a bar behind the (done, total) callback evaluation and training
// report through. Each run it follows gets a bar of its own, labelled in
// turn by labels (the last label serves the runs past them): a new run
// begins when total changes or done falls below half of what it was
// (workers finishing out of order move it back a little, even past the
// end: that is not a new run). Finish the last run with the returned
// finish.
func Func(w io.Writer, o Options, labels ...string) (report func(done, total int), finish func()) {
	var mu sync.Mutex
	var cur *Bar
	var high, prevTotal, runs int
	report = func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if cur == nil || total != prevTotal || 2*done < high {
			if cur != nil {
				cur.Finish()
			}
			label := "working"
			if len(labels) > 0 {
				label = labels[min(runs, len(labels)-1)]
			}
			runs++
			cur = New(w, label, int64(total), o)
			cur.base = int64(done) // the run began before its first report
			high = 0
		}
		high, prevTotal = max(high, done), total
		cur.Set(int64(high))
		if high >= total {
			cur.Finish()
		}
	}
	finish = func() {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			cur.Finish()
		}
	}
	return report, finish
}

func (b *Bar) rate(perSecond float64) string {
	if b.o.Bytes {
		return Size(int64(perSecond)) + "/s"
	}
	return Rate(perSecond, b.o.Unit)
}

// Reader counts what is read through r on b.
func (b *Bar) Reader(r io.Reader) io.Reader { return &reader{r, b} }

type reader struct {
	r io.Reader
	b *Bar
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.b.Add(int64(n))
	return n, err
}

// Duration rounds d for a person: "850ms", "12s", "2m05s", "1h02m".
func Duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Rate is "410 items/s", with a precision fit for its size.
func Rate(perSecond float64, unit string) string {
	switch {
	case perSecond >= 100:
		return fmt.Sprintf("%.0f %s/s", perSecond, unit)
	case perSecond >= 1:
		return fmt.Sprintf("%.1f %s/s", perSecond, unit)
	}
	return fmt.Sprintf("%.2f %s/s", perSecond, unit)
}

// Size is a byte count for a person: "82 MB", "12.3 MB", "950 kB".
func Size(n int64) string {
	switch {
	case n >= 100e6:
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
