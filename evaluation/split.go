package evaluation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/triagegw/triage/split"
)

// SplitReport compares the arms of a live A/B split from the split log
// the gateway writes: both arms served real traffic, so beside how each
// routed it says how each went (errors, latency, tokens). Live traffic
// carries no labels: this is not accuracy.
type SplitReport struct {
	N       int        `json:"n"`
	Skipped int        `json:"skipped"`
	From    time.Time  `json:"from"`
	To      time.Time  `json:"to"`
	Arms    []SplitArm `json:"arms"` // in the order they first appear
}

// SplitArm is one arm's requests.
type SplitArm struct {
	Name     string         `json:"name"`
	Requests int            `json:"requests"`
	Share    float64        `json:"share"`
	Versions map[string]int `json:"versions"`
	Routes   map[string]int `json:"routes"`
	Pools    map[string]int `json:"pools"`
	Reasons  map[string]int `json:"reasons"`
	// By counts what the arm was assigned by: principal, session, request.
	By map[string]int `json:"by"`
	// ErrorRate is the share of requests answered with a 5xx.
	ErrorRate float64 `json:"error_rate"`
	// LatencyMS is receipt to the end of the response.
	LatencyMS        Percentiles `json:"latency_ms"`
	PromptTokens     int64       `json:"prompt_tokens"`
	CompletionTokens int64       `json:"completion_tokens"`
	// TokensPerRequest is prompt and completion tokens per request.
	TokensPerRequest float64 `json:"tokens_per_request"`
}

// IsSplitLog reports whether a log's first record is a split record
// (rather than a shadow one).
func IsSplitLog(head []byte) bool {
	for line := range bytes.Lines(head) {
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		var rec struct {
			Arm string `json:"arm"`
		}
		return json.Unmarshal(line, &rec) == nil && rec.Arm != ""
	}
	return false
}

// ReadSplitLog reads a split log (JSONL of split.Record) and summarises
// each arm. Lines that are not records are skipped and counted; a log
// with no record is an error.
func ReadSplitLog(r io.Reader) (*SplitReport, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	rep := &SplitReport{}
	byName := map[string]int{}
	var lat [][]float64
	var errs []int
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var rec split.Record
		if err := json.Unmarshal(line, &rec); err != nil || rec.Arm == "" || rec.Reason == "" {
			rep.Skipped++
			continue
		}
		i, ok := byName[rec.Arm]
		if !ok {
			i = len(rep.Arms)
			byName[rec.Arm] = i
			rep.Arms = append(rep.Arms, SplitArm{Name: rec.Arm, Versions: map[string]int{}, Routes: map[string]int{}, Pools: map[string]int{},
				Reasons: map[string]int{}, By: map[string]int{}})
			lat, errs = append(lat, nil), append(errs, 0)
		}
		a := &rep.Arms[i]
		if rep.N == 0 || rec.Time.Before(rep.From) {
			rep.From = rec.Time
		}
		if rep.N == 0 || rec.Time.After(rep.To) {
			rep.To = rec.Time
		}
		rep.N++
		a.Requests++
		a.Versions[rec.Version]++
		a.Routes[rec.Route]++
		a.Pools[rec.Pool]++
		a.Reasons[rec.Reason]++
		a.By[rec.By]++
		if rec.Status >= 500 {
			errs[i]++
		}
		lat[i] = append(lat[i], rec.DurationMS)
		a.PromptTokens += rec.PromptTokens
		a.CompletionTokens += rec.CompletionTokens
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if rep.N == 0 {
		return nil, fmt.Errorf("evaluation: no split records in the log (%d lines skipped)", rep.Skipped)
	}
	for i := range rep.Arms {
		a := &rep.Arms[i]
		n := float64(a.Requests)
		a.Share = n / float64(rep.N)
		a.ErrorRate = float64(errs[i]) / n
		a.LatencyMS = percentiles(lat[i])
		a.TokensPerRequest = float64(a.PromptTokens+a.CompletionTokens) / n
	}
	return rep, nil
}
