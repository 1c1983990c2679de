package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/triagegw/triage/classifier/onnx"
	"github.com/triagegw/triage/datasets"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/openai"
	"github.com/triagegw/triage/rules"
)

// chatInput builds the request a user would send: model, one user message.
func chatInput(model, text string, header http.Header) (rules.Input, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": text}}})
	r, err := openai.Extract(body)
	if err != nil {
		return rules.Input{}, err
	}
	return rules.Input{Req: r, Body: body, Header: header}, nil
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
	fs := flag.NewFlagSet("triage route", flag.ContinueOnError)
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
	rt, err := loadRouting(cfg, &tierCache{})
	if err != nil {
		return err
	}
	if rt.set == nil {
		return fmt.Errorf("%s names no rules file: requests are routed by model name only", *cfgPath)
	}
	if *model == "" {
		*model = rt.set.Aliases()[0]
	}
	in, err := chatInput(*model, strings.Join(fs.Args(), " "), hdr.h)
	if err != nil {
		return err
	}
	_ = rt.set.LoadTier2() // as the gateway will have it loaded; a failure shows in the trace
	tr := rt.set.ExplainDecision(ctx, in)
	out := struct {
		rules.Trace
		RulesVersion string `json:"rules_version"`
	}{tr, rt.set.Version()}
	if tr.Decision.Reason == rules.ReasonExplicitModel {
		out.Decision.Pool = "(by model name: " + *model + ")"
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// runRules is `triage rules check`.
func runRules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: triage rules check [--config triage.yaml] [--data FILE.jsonl] [RULES.yaml]")
		return errUsage
	}
	fs := flag.NewFlagSet("triage rules check", flag.ContinueOnError)
	cfgPath := fs.String("config", "triage.yaml", "gateway config whose pools the rules route to")
	data := fs.String("data", "", "JSONL prompts to dry-run ({\"text\"[,\"label\"]}): route distribution, escalation, per-route precision")
	fs.SetOutput(stderr)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return errUsage
	}
	if fs.NArg() == 1 { // check this rules file against the config's pools
		cfg.Rules = fs.Arg(0)
		cfg.Path = "" // a path given on the command line is relative to the working directory
	}
	if cfg.Rules == "" {
		return fmt.Errorf("no rules file: give one, or name it in %s (rules:)", *cfgPath)
	}
	rt, err := loadRouting(cfg, &tierCache{})
	if err != nil {
		return err
	}
	s := rt.set
	t2 := "never needed"
	if s.NeedsTier2() {
		t2 = "reachable"
		if !onnx.Available() {
			t2 += " (but not in this build: escalations fall back to tier 1; build with -tags ort)"
		}
	}
	fmt.Fprintf(stdout, "%s: ok — version %s, aliases %v, %d routes, default pool %s, tier 2 %s\n",
		cfg.RulesPath(), s.Version(), s.Aliases(), len(s.File().Routes), s.Default(), t2)
	if *data == "" {
		return nil
	}
	set, err := datasets.ReadJSONL(*data)
	if err != nil {
		return err
	}
	byRoute := map[string]*routeStat{}
	reasons := map[string]int{}
	escalated := 0
	for _, r := range s.File().Routes {
		st := &routeStat{classes: map[string]bool{}}
		for _, c := range r.When.Classes {
			st.classes[c] = true
		}
		byRoute[r.Name] = st
	}
	byRoute["default"] = &routeStat{}
	_ = s.LoadTier2() // the figures are of decisions, not of the load
	for _, row := range set.Rows {
		in, err := chatInput(s.Aliases()[0], row.Text, http.Header{})
		if err != nil {
			return err
		}
		d := s.Decide(ctx, in)
		name := d.Route
		if name == "" {
			name = "default"
		}
		st := byRoute[name]
		st.n++
		reasons[d.Reason]++
		if d.Reason == rules.ReasonBelowFloor || d.Reason == rules.ReasonClassRequiresTier2 || d.Reason == rules.ReasonTier2Timeout {
			escalated++
		}
		if row.Label != "" {
			st.labelled++
			// A route is right when the label is one of its classes; the
			// default pool when no route claims the label.
			if name == "default" {
				if !claimed(byRoute, row.Label) {
					st.right++
				}
			} else if st.classes[row.Label] {
				st.right++
			}
		}
	}
	n := len(set.Rows)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nroute\trequests\tshare\tprecision (labelled)\n")
	names := make([]string, 0, len(byRoute))
	for k := range byRoute {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		st := byRoute[k]
		prec := "-"
		if st.labelled > 0 {
			prec = fmt.Sprintf("%.3f (%d)", float64(st.right)/float64(st.labelled), st.labelled)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%s\n", k, st.n, 100*float64(st.n)/float64(n), prec)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nescalation (tier 1 not enough): %.1f%% of %d\nreasons:", 100*float64(escalated)/float64(n), n)
	rs := make([]string, 0, len(reasons))
	for k := range reasons {
		rs = append(rs, k)
	}
	sort.Strings(rs)
	for _, k := range rs {
		fmt.Fprintf(stdout, " %s=%d", k, reasons[k])
	}
	fmt.Fprintln(stdout)
	return nil
}

type routeStat struct {
	n, labelled, right int
	classes            map[string]bool
}

// claimed reports whether some route takes the class label.
func claimed(byRoute map[string]*routeStat, label string) bool {
	for _, st := range byRoute {
		if st.classes[label] {
			return true
		}
	}
	return false
}
