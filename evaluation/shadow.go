package evaluation

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/triagegw/triage/shadow"
)

// ShadowReport compares the live decisions of sampled requests with the
// decisions a shadow rule set made of the same requests, read from the
// shadow decision log the gateway writes. Live traffic carries no labels,
// so it reports agreement, where the shadow would have routed differently,
// how each side decided (reasons, tiers) and what it cost, not accuracy.
type ShadowReport struct {
	N int `json:"n"`
	// Skipped counts lines that were not records (a torn last line, say).
	Skipped int           `json:"skipped"`
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Live    ShadowSummary `json:"live"`
	Shadow  ShadowSummary `json:"shadow"`
	// PoolAgreement is the share of requests both sides sent to the same
	// pool; ClassAgreement the share where both tiers' top classes agree
	// (among requests where both classified).
	PoolAgreement  float64 `json:"pool_agreement"`
	ClassAgreement float64 `json:"class_agreement"`
	Differ         int     `json:"differ"`
	// Counterfactual: Counts[i][j] requests live sent to pool Labels[i]
	// and the shadow to Labels[j]. Classes: the same for top classes.
	Counterfactual Confusion `json:"counterfactual"`
	Classes        Confusion `json:"classes"`
}

// ShadowSummary is one side of a shadow log.
type ShadowSummary struct {
	// Versions counts requests by rules version (more than one when the
	// rules were reloaded during the log).
	Versions map[string]int `json:"versions"`
	Reasons  map[string]int `json:"reasons"`
	Pools    map[string]int `json:"pools"`
	// Tier2Rate is the share of requests a tier-2 verdict decided.
	Tier2Rate float64 `json:"tier2_rate"`
	// Escalation is the share of requests that asked for tier 2.
	Escalation float64     `json:"escalation"`
	Latency    Percentiles `json:"latency_us"`
}

// ReadShadowLog reads a shadow decision log (JSONL of shadow.Record)
// and compares its two sides. Lines that are not records are skipped and
// counted; a log with no record is an error.
func ReadShadowLog(r io.Reader) (*ShadowReport, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	rep := &ShadowReport{}
	var recs []shadow.Record
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var rec shadow.Record
		if err := json.Unmarshal(line, &rec); err != nil || rec.Live.Reason == "" || rec.Shadow.Reason == "" {
			rep.Skipped++
			continue
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("evaluation: no shadow decisions in the log (%d lines skipped)", rep.Skipped)
	}
	rep.N = len(recs)
	rep.From, rep.To = recs[0].Time, recs[0].Time
	var lat [2][]float64
	var esc, t2 [2]int
	sides := [2]*ShadowSummary{&rep.Live, &rep.Shadow}
	for _, s := range sides {
		s.Versions, s.Reasons, s.Pools = map[string]int{}, map[string]int{}, map[string]int{}
	}
	pools, classes := map[[2]string]int{}, map[[2]string]int{}
	classBoth, classSame := 0, 0
	for _, rec := range recs {
		if rec.Time.Before(rep.From) {
			rep.From = rec.Time
		}
		if rec.Time.After(rep.To) {
			rep.To = rec.Time
		}
		for i, d := range [2]shadow.Side{rec.Live, rec.Shadow} {
			s := sides[i]
			s.Versions[d.Version]++
			s.Reasons[d.Reason]++
			s.Pools[d.Pool]++
			lat[i] = append(lat[i], d.Micros)
			if d.Tier == 2 {
				t2[i]++
			}
			if Escalated(d.Reason) {
				esc[i]++
			}
		}
		pools[[2]string{rec.Live.Pool, rec.Shadow.Pool}]++
		if rec.Live.Pool == rec.Shadow.Pool {
			rep.PoolAgreement++
		} else {
			rep.Differ++
		}
		if rec.Live.Tier > 0 && rec.Shadow.Tier > 0 {
			classBoth++
			classes[[2]string{rec.Live.Class, rec.Shadow.Class}]++
			if rec.Live.Class == rec.Shadow.Class {
				classSame++
			}
		}
	}
	n := float64(rep.N)
	rep.PoolAgreement /= n
	if classBoth > 0 {
		rep.ClassAgreement = float64(classSame) / float64(classBoth)
	}
	for i, s := range sides {
		s.Latency = percentiles(lat[i])
		s.Tier2Rate = float64(t2[i]) / n
		s.Escalation = float64(esc[i]) / n
	}
	rep.Counterfactual = pairCounts(pools)
	rep.Classes = pairCounts(classes)
	return rep, nil
}

// pairCounts turns counts of (row, column) pairs into a square matrix over
// every label either side used, sorted.
func pairCounts(m map[[2]string]int) Confusion {
	seen := map[string]bool{}
	for k := range m {
		seen[k[0]], seen[k[1]] = true, true
	}
	labels := make([]string, 0, len(seen))
	for l := range seen {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	idx := map[string]int{}
	for i, l := range labels {
		idx[l] = i
	}
	c := Confusion{Labels: labels, Counts: make([][]int, len(labels))}
	for i := range c.Counts {
		c.Counts[i] = make([]int, len(labels))
	}
	for k, v := range m {
		c.Counts[idx[k[0]]][idx[k[1]]] += v
	}
	return c
}
