package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/label"
)

const labelUsage = `usage: triage label --sample FILE [--sample FILE ...] --out FILE [--config FILE | --heads DIR | --classes A,B,...] [flags]

Serves a page (on 127.0.0.1 by default) to label the prompts of a sample
(sample.path of the gateway's config) one at a time with the keyboard. Each
label is appended to --out as {"text","label","source","id"} and synced
before the next prompt shows; run it again to go on where it stopped.
--status prints the progress and the stopping hint, and exits.`

type labelFlags struct {
	place       placeFlags
	samples     stringList
	out         string
	classes     string
	listen      string
	allowRemote bool
	source      string
	margin      float64
	status      bool
}

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func parseLabelFlags(args []string, stderr io.Writer) (*labelFlags, error) {
	var f labelFlags
	fs := newFlagSet("triage label", stderr)
	f.place.register(fs, "heads artifact directory whose classes are the labels")
	fs.Var(&f.samples, "sample", "sample file to label (JSONL: the gateway's sample records, or any rows with a \"text\"); may be given more than once")
	fs.StringVar(&f.out, "out", "", "labels file to append to (created with mode 0600; resumed when it holds labels)")
	fs.StringVar(&f.classes, "classes", "", "the labels, comma-separated, instead of the heads' classes (\"other\" is always offered)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8090", "address to serve the page on")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "let --listen be a non-loopback address (the page shows the prompts to whoever can reach it)")
	fs.StringVar(&f.source, "source", "traffic", "the labels' source column")
	fs.Float64Var(&f.margin, "margin", 0.03, "half-width of the 95% interval of the route precision that the stopping hint aims for")
	fs.BoolVar(&f.status, "status", false, "print the progress and the stopping hint, and exit")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	f.place.parsed(fs)
	switch {
	case len(f.samples) == 0:
		fmt.Fprintln(stderr, "--sample is required\n"+labelUsage)
		return nil, errUsage
	case f.out == "":
		fmt.Fprintln(stderr, "--out is required\n"+labelUsage)
		return nil, errUsage
	}
	return &f, nil
}

func runLabel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseLabelFlags(args, stderr)
	if err != nil {
		return err
	}
	if !f.status && !f.allowRemote && !label.Loopback(f.listen) {
		return badInput(fmt.Errorf("--listen %s is not a loopback address: the page shows prompts from your traffic; use 127.0.0.1:PORT, or --allow-remote to serve it there anyway", f.listen))
	}
	classes, err := f.labelClasses()
	if err != nil {
		return badInput(err)
	}
	s, err := label.Open(label.Options{Samples: f.samples, Out: f.out, Classes: classes, Source: f.source, Margin: f.margin})
	if err != nil {
		if errors.Is(err, label.ErrLocked) {
			return err
		}
		return badInput(err)
	}
	defer s.Close()
	st := s.State()
	printLabelStatus(stdout, f, s, st)
	if f.status {
		return nil
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "label at http://%s/  (Ctrl-C stops; every label is on disk when the next prompt shows)\n", ln.Addr())
	return label.Serve(ctx, ln, label.Handler(s, f.allowRemote))
}

// labelClasses are --classes, else the classes of the heads (--heads, or
// those the config's rules name).
func (f *labelFlags) labelClasses() ([]string, error) {
	if f.classes != "" {
		var out []string
		for _, c := range strings.Split(f.classes, ",") {
			if c = strings.TrimSpace(c); c != "" {
				out = append(out, c)
			}
		}
		return out, nil
	}
	cfg, err := f.place.loadConfig()
	if err != nil {
		return nil, err
	}
	dir, err := f.place.headsDir(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (or give the labels with --classes)", err)
	}
	h, err := classifier.LoadHeads(dir)
	if err != nil {
		return nil, err
	}
	return h.Classes, nil
}

func printLabelStatus(w io.Writer, f *labelFlags, s *label.Session, st label.State) {
	rd := s.ReadInfo()
	fmt.Fprintf(w, "%d prompts to label from %s (%d records", st.Total, strings.Join(f.samples, ", "), rd.Records)
	if rd.Duplicates > 0 {
		fmt.Fprintf(w, ", %d repeated", rd.Duplicates)
	}
	if rd.Empty > 0 {
		fmt.Fprintf(w, ", %d empty", rd.Empty)
	}
	fmt.Fprintln(w, ")")
	for _, p := range rd.Cut {
		fmt.Fprintf(w, "  %s ends in a line cut short: read up to its last whole record\n", p)
	}
	fmt.Fprintf(w, "%d labelled, %d not sure, %d left; labels in %s\n", st.Labelled, st.Unsure, st.Left, st.Out)
	p := st.Precision
	switch {
	case p.Routed > 0:
		fmt.Fprintf(w, "route precision %.3f (95%%: %.3f-%.3f) on %d labels the gateway sent to a class route\n", p.Estimate, p.Low, p.High, p.Routed)
	case p.RoutedRate == 0:
		fmt.Fprintln(w, "no prompt of this sample went to a class route: no route precision to estimate")
		return
	}
	if p.More > st.Left {
		fmt.Fprintf(w, "the sample is too small to narrow it to ±%g: about %d more labels would (%d on class routes; %.0f%% of the sample went to one)\n", p.Margin, p.More, p.Needed, 100*p.RoutedRate)
	} else if p.More > 0 {
		fmt.Fprintf(w, "about %d more labels narrow it to ±%g (%d on class routes needed; %.0f%% of the sample went to one)\n", p.More, p.Margin, p.Needed, 100*p.RoutedRate)
	} else if p.Routed >= p.Needed {
		fmt.Fprintf(w, "enough labels: the interval is within ±%g\n", p.Margin)
	}
}
