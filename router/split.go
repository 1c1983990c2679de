package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triagegw/triage/router/metrics"
	"github.com/triagegw/triage/rules"
	"github.com/triagegw/triage/split"
)

// splitter is what a live A/B split needs beyond one snapshot: the
// collectors and the log's queue and worker.
type splitter struct {
	m   *metrics.Split
	log *split.Log
}

func newSplitter(reg prometheus.Registerer) *splitter {
	m := metrics.NewSplit(reg)
	return &splitter{m: m, log: split.NewLog(0, m.LogDropped.Inc)}
}

// run writes the split log until ctx is done.
func (sp *splitter) run(ctx context.Context) { sp.log.Run(ctx) }

// splitState is a snapshot's split, resolved when the snapshot is built.
type splitState struct {
	arms *rules.Arms
	// header holds each arm's x-triage-arm value, by rules.Arm.
	header [3][]string
	m      [3]*metrics.SplitArm
	// version is each arm's rules version, by rules.Arm.
	version [3]string
	out     io.Writer // the split log; nil: none
	// unassigned counts requests left outside the split.
	unassigned prometheus.Counter
}

// applySplit resolves the split of the rules s is built with, opening its
// log.
func (g *Gateway) applySplit(s *snapshot, routing *rules.Set) error {
	arms := routing.Split()
	if arms == nil {
		return nil
	}
	st := &splitState{arms: arms, unassigned: g.split.m.Unassigned}
	for _, a := range []rules.Arm{rules.ArmA, rules.ArmB} {
		set := routing
		if a == rules.ArmB {
			set = arms.Candidate()
		}
		routes := []string{"default"}
		for _, r := range set.Routes() {
			routes = append(routes, r.Name)
		}
		st.header[a] = []string{arms.Name(a)}
		st.m[a] = g.split.m.Arm(arms.Name(a), routes)
		st.version[a] = set.Version()
	}
	if p := arms.Log(); p != "" && g.shadowLog != nil {
		w, err := g.shadowLog(p)
		if err != nil {
			return fmt.Errorf("split.log: %w", err)
		}
		st.out = w
	}
	s.split = st
	return nil
}

// assignArm puts a request on an arm of the rules' split (rules.ArmNone
// without one) and marks sig with it, so that the arm's rules decide: by
// the principal access control named, else the conversation (the session
// header, else the fingerprint), else, only with split.by_request, the
// request id, which is not sticky. A request with nothing to assign it by
// stays outside the split (rules.ArmNone: A's rules decide, neither arm
// counts it). It says which arm in x-triage-arm when the rules explain.
// Without a split it costs a nil check.
func (s *snapshot) assignArm(h http.Header, sig *rules.Signals, al *accessLine) rules.Arm {
	st := s.split
	if st == nil {
		return rules.ArmNone
	}
	principal, id := al.principal, al.id
	by, key := rules.ByPrincipal, principal
	switch {
	case principal != "":
	case sig.Session != "":
		by, key = rules.BySession, sig.Session
	case st.arms.ByRequest():
		by, key = rules.ByRequest, id
	default:
		sig.Arm, al.armBy = rules.ArmNone, ""
		st.unassigned.Inc()
		return rules.ArmNone
	}
	sig.Arm, al.armBy = st.arms.Assign(by, key), by
	if al.trace != nil && al.trace.span.IsRecording() {
		al.trace.span.SetAttributes(attrArm.String(st.arms.Name(sig.Arm)))
	}
	if s.rules.Explain() {
		h["X-Triage-Arm"] = st.header[sig.Arm]
	}
	return sig.Arm
}

// splitDone counts a request on an arm and queues its log line.
func (g *Gateway) splitDone(s *snapshot, al *accessLine, poolName string, end time.Time) {
	st := s.split
	if st == nil {
		return
	}
	d := end.Sub(al.start)
	m := st.m[al.arm]
	route := orDefault(al.dec.Route)
	m.Request(route, al.status)
	m.Duration.Observe(d.Seconds())
	if st.out == nil {
		return
	}
	res := &al.res
	rec := split.Record{
		Time: al.start.UTC(), Arm: st.arms.Name(al.arm), By: al.armBy,
		RequestID: strings.Clone(al.id), Version: st.version[al.arm],
		Route: route, Pool: poolName, Reason: al.dec.Reason, Tier: al.dec.Tier,
		Status: al.status, DurationMS: split.Millis(d), TTFBMS: split.Millis(res.TTFB), DecisionUS: split.Micros(al.decideTime),
	}
	if al.dec.Tier > 0 {
		rec.Class, rec.Score = al.dec.Class, al.dec.Score
	}
	if res.UsageFound {
		rec.PromptTokens, rec.CompletionTokens = res.Usage.PromptTokens, res.Usage.CompletionTokens
	}
	g.split.log.Offer(st.out, &rec)
}
