package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/netaddr"
	"github.com/triagegw/triage/label"
)

const labelUsage = `usage: triage label --sample FILE [--sample FILE ...] --out FILE [--config FILE | --heads DIR | --classes A,B,...] [flags]

Serves a page (on 127.0.0.1 by default) to label the prompts of a sample
(sample.path of the gateway's config) one at a time with the keyboard. Each
label is appended to --out as {"text","label","source","id"} and synced
before the next prompt shows; run it again to go on where it stopped.
--status prints the progress and the stopping hint, and exits.

With --by POOL, a model the gateway fronts proposes the labels instead: each
prompt is sent to the running gateway (--gateway URL, key from --key-env) as
a chat completion naming POOL, with a fixed instruction listing the classes,
at temperature 0; an answer that is exactly a class is a label marked
"labeller":"model:POOL", anything else is "not sure". --agreement HUMAN.jsonl
prints how far those labels agree with a person's.`

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
	// --by: a model proposes the labels
	by, gateway, keyEnv    string
	concurrency, maxTokens int
	maxTokensTotal         int
	agreement              string
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
	fs.StringVar(&f.by, "by", "", "a pool the gateway fronts, to propose the labels instead of a person: the model name (or alias) clients send for it, or the pool's name in --config; see --gateway")
	fs.StringVar(&f.gateway, "gateway", "http://127.0.0.1:8080", "with --by: the running gateway's base URL; every call goes through it")
	fs.StringVar(&f.keyEnv, "key-env", "", "with --by: environment variable holding the gateway API key to send")
	fs.IntVar(&f.concurrency, "concurrency", 4, "with --by: most calls in flight")
	fs.IntVar(&f.maxTokens, "max-tokens", 16, "with --by: max_tokens of each call (a class name is a few)")
	fs.IntVar(&f.maxTokensTotal, "max-tokens-total", 200000, "with --by: most tokens all the calls may cost (prompt and answer, as the usage says); the prompts it would not cover are left for another run")
	fs.StringVar(&f.agreement, "agreement", "", "a person's labels file: print how far the labels in --out (a model's) agree with it (Cohen's kappa, per class)")
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
	case f.by != "" && (f.concurrency < 1 || f.concurrency > 64):
		fmt.Fprintln(stderr, "triage label: --concurrency is 1 to 64")
		return nil, errUsage
	case f.by != "" && (f.maxTokens < 1 || f.maxTokensTotal < 1):
		fmt.Fprintln(stderr, "triage label: --max-tokens and --max-tokens-total are at least 1")
		return nil, errUsage
	}
	return &f, nil
}

func runLabel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseLabelFlags(args, stderr)
	if err != nil {
		return err
	}
	if !f.status && f.by == "" && !f.allowRemote && !netaddr.LoopbackAddr(f.listen) {
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
	if f.status || f.by != "" {
		if f.by != "" && !f.status {
			if err := proposeLabels(ctx, f, s, stdout); err != nil {
				return err
			}
		}
		if f.agreement != "" {
			return printAgreement(stdout, f.agreement, f.out)
		}
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

// proposeLabels asks the pool --by names, through the gateway, for a
// label of every pending prompt, and says what it did.
func proposeLabels(ctx context.Context, f *labelFlags, s *label.Session, stdout io.Writer) error {
	model := f.by
	if cfg, err := f.place.loadConfig(); err == nil && cfg != nil {
		for _, p := range cfg.Pools {
			if p.Name == f.by {
				model = p.Model // the name a client sends for the pool
			}
		}
	}
	c := &label.ChatClient{URL: f.gateway, Model: model, MaxTokens: f.maxTokens}
	if f.keyEnv != "" {
		if c.Key = os.Getenv(f.keyEnv); c.Key == "" {
			return badInput(fmt.Errorf("--key-env %s: the variable is empty or unset", f.keyEnv))
		}
	}
	u, err := url.Parse(f.gateway)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badInput(fmt.Errorf("--gateway %q: want the gateway's base URL, http://host:port", f.gateway))
	}
	if c.Key != "" && u.Scheme == "http" && !netaddr.Loopback(u.Hostname()) {
		return badInput(fmt.Errorf("--gateway %s: the key would cross the network in clear text: use https://, or a gateway on this machine", f.gateway))
	}
	system := label.Instruction(s.Classes())
	o := label.ProposeOptions{Ask: c.Ask, Labeller: "model:" + f.by, Concurrency: f.concurrency, MaxTokensTotal: f.maxTokensTotal,
		// At most: the prompt and the instruction at one token per 3
		// bytes (English runs near 4), the framing, and the answer.
		Reserve: func(p string) int { return (len(p)+len(system))/3 + 16 + f.maxTokens }}
	via := ""
	if model != f.by {
		via = fmt.Sprintf(" (model %q)", model)
	}
	fmt.Fprintf(stdout, "asking %s%s through %s: %d prompts, at most %d at a time and %d tokens in all\n", f.by, via, f.gateway, len(s.Pending()), f.concurrency, f.maxTokensTotal)
	st, err := label.Propose(ctx, s, o)
	fmt.Fprintf(stdout, "%d answered: %d labelled, %d not sure (not exactly a class); %d failed (left for another run); %d tokens\n",
		st.Asked, st.Labelled, st.Unsure, st.Failed, st.Tokens)
	if st.Budget > 0 {
		fmt.Fprintf(stdout, "the token budget (--max-tokens-total %d) left %d prompts unasked: run again to go on\n", f.maxTokensTotal, st.Budget)
	}
	if err != nil {
		return fmt.Errorf("label --by %s: %w", f.by, err)
	}
	fmt.Fprintf(stdout, "these are a model's labels (\"labeller\": \"model:%s\"): measure them against a person's (--agreement HUMAN.jsonl) before calibrating on them\n", f.by)
	return nil
}

// printAgreement prints how far the model's labels in modelPath agree with
// a person's in humanPath.
func printAgreement(w io.Writer, humanPath, modelPath string) error {
	human, err := label.ReadLabels(humanPath)
	if err != nil {
		return badInput(err)
	}
	model, err := label.ReadLabels(modelPath)
	if err != nil {
		return badInput(err)
	}
	unsure, err := label.ReadUnsure(modelPath)
	if err != nil {
		return badInput(err)
	}
	a := label.Agree(human, model, unsure)
	fmt.Fprintf(w, "agreement of %s with %s: %d prompts both labelled", modelPath, humanPath, a.Both)
	if a.Unsure+a.Missing > 0 {
		fmt.Fprintf(w, " (of %d the person labelled, %d the model was not sure of, %d it has not labelled)", a.Both+a.Unsure+a.Missing, a.Unsure, a.Missing)
	}
	fmt.Fprintln(w)
	if a.Both == 0 {
		fmt.Fprintln(w, "nothing to compare: no prompt has both a person's label and the model's")
		return nil
	}
	fmt.Fprintf(w, "raw agreement %.3f (95%% %.3f-%.3f), Cohen's kappa %.3f\n", a.Raw, wilsonLo(a.Agree, a.Both), wilsonHi(a.Agree, a.Both), a.Kappa)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\tperson\tmodel\tboth\tagreement\t")
	for _, c := range a.Classes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.3f\t\n", c.Class, c.Human, c.Model, c.Agree, c.Rate)
	}
	return tw.Flush()
}

func wilsonLo(k, n int) float64 { return evaluation.Wilson(k, n).Lo }
func wilsonHi(k, n int) float64 { return evaluation.Wilson(k, n).Hi }

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
