package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/evaluation"
	"github.com/triagegw/triage/internal/progress"
	"github.com/triagegw/triage/lifecycle"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/rules"
)

// askAbout is what the rules see of a one-turn request naming model about
// text, cut by their window as the gateway would cut it.
func askAbout(set *rules.Set, model, text string, header http.Header) rules.Signals {
	return rules.Signals{Model: model, Text: set.Window().Clip(text), Header: header}
}

type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" }
func (f *headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	if !ok {
		return errors.New(`want "Name: value"`)
	}
	f.h.Add(strings.TrimSpace(k), strings.TrimSpace(val))
	return nil
}

func runRoute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("triage route", stderr)
	cfgPath := fs.String("config", "triage.yaml", "gateway config naming the rules")
	model := fs.String("model", "", "model the request names (default: the rules' first alias)")
	hdr := &headerFlag{h: http.Header{}}
	fs.Var(hdr, "header", `request header "Name: value" (repeatable)`)
	if err := parseWithArgs(fs, args, stderr, "usage: triage route [--config FILE] [--model NAME] [--header 'K: V'] PROMPT\n\nPrints how the gateway would route PROMPT: each tier's top classes, the floors applied, why it escalated, the route and the pool."); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	rt, err := (&lifecycle.Models{Budget: rules.Offline}).Load(cfg)
	if err != nil {
		return err
	}
	if rt.Set == nil {
		return fmt.Errorf("%s names no rules file: requests are routed by model name only", *cfgPath)
	}
	if *model == "" {
		*model = rt.Set.Aliases()[0]
	}
	in := askAbout(rt.Set, *model, strings.Join(fs.Args(), " "), hdr.h)
	_ = rt.Set.LoadTier2() // as the gateway will have it loaded; a failure shows in the trace
	tr := rt.Set.ExplainDecision(ctx, in)
	out := struct {
		rules.Trace
		RulesVersion string `json:"rules_version"`
	}{tr, rt.Set.Version()}
	if tr.Decision.Reason == rules.ReasonExplicitModel {
		out.Decision.Pool = "(by model name: " + *model + ")"
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

const rulesCheckUsage = `usage: triage rules check [--config FILE] [--data FILE.jsonl] [RULES.yaml]

Checks a rules file against the gateway config's pools and the heads it
names: every problem at once, with its line and column. RULES.yaml, a path
relative to the working directory, defaults to the rules the config names
(rules:, relative to the config). With --data, decides every prompt of the
file as the gateway would and shows where they would go.
`

// runRules is "triage rules check".
func runRules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, rulesCheckUsage)
		return errUsage
	}
	fs := newFlagSet("triage rules check", stderr)
	cfgPath := fs.String("config", "triage.yaml", "gateway config whose pools the rules route to, and whose models_dir holds the model files")
	data := fs.String("data", "", "JSONL prompts to dry-run ({\"text\"[,\"label\"]}): route distribution, escalation, per-route precision")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, rulesCheckUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "triage rules check: one rules file at most, got %d: %v\n", fs.NArg(), fs.Args())
		fs.Usage()
		return errUsage
	}
	set, err := checkRules(*cfgPath, fs.Arg(0), stdout)
	if err != nil || *data == "" {
		return err
	}
	return dryRun(ctx, set, *data, stdout, stderr)
}

// checkRules compiles the rules (file, or the config's rules: when empty)
// against the config's pools and heads, and says what it found.
func checkRules(cfgPath, file string, stdout io.Writer) (*rules.Set, error) {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if file != "" { // check this rules file against the config's pools
		cfg.UseRules(file)
	}
	if cfg.Rules == "" {
		return nil, fmt.Errorf("no rules file: give one, or name it in %s (rules:)", cfgPath)
	}
	rt, err := (&lifecycle.Models{Budget: rules.Offline}).Load(cfg)
	if err != nil {
		return nil, err
	}
	s := rt.Set
	t2 := "never needed"
	if s.NeedsTier2() {
		t2 = "reachable"
		if e := s.File().Tier2.Encoder; e != nil {
			t2 += " (remote encoder " + e.Model + " at " + e.URL + ")"
		} else if !onnx.Available() {
			t2 += " (but not in this build: escalations fall back to tier 1; build with -tags ort)"
		}
	}
	fmt.Fprintf(stdout, "%s: ok — version %s, aliases %v, %d routes, default pool %s, tier 2 %s\n",
		cfg.RulesPath(), s.Version(), s.Aliases(), len(s.File().Routes), s.Default(), t2)
	for _, w := range s.Warnings() {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return s, nil
}

// dryRun decides every prompt of data with the compiled set, as
// evaluation.Rules does for `triage eval --rules`, and prints where they
// went: requests, share and labelled precision per route, escalation and
// reasons.
func dryRun(ctx context.Context, s *rules.Set, data string, stdout, stderr io.Writer) error {
	ds, err := datasets.ReadJSONL(data)
	if err != nil {
		return err
	}
	items := make([]evaluation.Item, len(ds.Rows))
	for i, r := range ds.Rows {
		items[i] = evaluation.Item{Text: r.Text, Label: r.Label, Cols: r.Cols}
	}
	report, finish := progress.Func(stderr, progress.Options{}, "rules check: deciding "+filepath.Base(data))
	out, err := evaluation.Rules(ctx, s, items, evaluation.Options{Progress: report})
	finish()
	if err != nil {
		return err
	}
	type stat struct{ n, labelled, right int }
	byRoute := map[string]*stat{"default": {}}
	for _, r := range s.File().Routes {
		byRoute[r.Name] = &stat{}
	}
	reasons := map[string]int{}
	escalated := 0
	for i, oc := range out {
		st := byRoute[orDefaultRoute(oc.Route)]
		st.n++
		reasons[oc.Reason]++
		if evaluation.Escalated(oc.Reason) {
			escalated++
		}
		if items[i].Label != "" {
			st.labelled++
			if oc.Correct {
				st.right++
			}
		}
	}
	n := len(out)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nroute\trequests\tshare\tprecision (labelled)\n")
	for _, k := range slices.Sorted(maps.Keys(byRoute)) {
		st := byRoute[k]
		prec := "-"
		if st.labelled > 0 {
			prec = fmt.Sprintf("%.3f (%d)", float64(st.right)/float64(st.labelled), st.labelled)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%s\n", k, st.n, 100*float64(st.n)/float64(n), prec)
	}
	tw.Flush()
	for _, r := range s.Routes() {
		if st := byRoute[r.Name]; st != nil && st.n == 0 {
			fmt.Fprintf(stdout, "warning: route %s took none of the %d requests of %s\n", r.Name, n, data)
		}
	}
	fmt.Fprintf(stdout, "\nescalation (tier 1 not enough): %.1f%% of %d\nreasons:", 100*float64(escalated)/float64(n), n)
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		fmt.Fprintf(stdout, " %s=%d", k, reasons[k])
	}
	fmt.Fprintln(stdout)
	return nil
}

func orDefaultRoute(route string) string {
	if route == "" {
		return "default"
	}
	return route
}
