package evaluation

// Report is what an evaluation found. JSON field names are part of the
// command-line contract (`triage eval --json`).
type Report struct {
	// Spec says what was evaluated ("tier1 of models/heads/subjects",
	// "rules rules.yaml"); Data the dataset file and its sha256.
	Spec       string `json:"spec"`
	Data       string `json:"data"`
	DataSHA256 string `json:"data_sha256,omitempty"`
	// Mode is "tier" (the top class of one tier, argmax) or "rules" (the
	// route a rule set chooses: a class route, or the default pool).
	Mode string `json:"mode"`
	N    int    `json:"n"`

	Accuracy       float64 `json:"accuracy"`
	MacroPrecision float64 `json:"macro_precision"`
	MacroRecall    float64 `json:"macro_recall"`
	MacroF1        float64 `json:"macro_f1"`
	MicroPrecision float64 `json:"micro_precision"`
	MicroRecall    float64 `json:"micro_recall"`
	MicroF1        float64 `json:"micro_f1"`
	// Coverage is the share of items sent to a class route rather than the
	// default (in tier mode: predicted with a score at or above the class's
	// floor, for classes other than the default-bound ones).
	Coverage float64 `json:"coverage"`
	// EscalationRate is the share of items a rule set sent toward tier 2
	// (below_floor, class_requires_tier2, tier2_timeout); Escalations counts
	// every decision reason.
	EscalationRate float64        `json:"escalation_rate"`
	Reasons        map[string]int `json:"reasons,omitempty"`
	// RoutePrecision (rules mode) is the share of the items a class route
	// took whose label the route covers; PerRoute the same per class
	// route, by name.
	RoutePrecision float64                `json:"route_precision,omitempty"`
	PerRoute       map[string]RouteFigure `json:"per_route,omitempty"`
	// AccuracyCI and RoutePrecisionCI are Wilson 95% intervals (Wilson):
	// the accuracy's over the N items, the route precision's over the
	// Routed items a class route took (rules mode). Their width is what
	// the number of labels buys.
	AccuracyCI       Interval  `json:"accuracy_ci"`
	Routed           int       `json:"routed,omitempty"`
	RoutePrecisionCI *Interval `json:"route_precision_ci,omitempty"`

	PerClass map[string]ClassReport `json:"per_class"`
	// Confusion: Counts[i][j] items labelled Labels[i] predicted Labels[j];
	// the last label is "(default)" in rules mode.
	Confusion Confusion `json:"confusion"`

	// ECE is the expected calibration error of the deciding tier's top
	// score over Reliability's bins.
	ECE         float64 `json:"ece"`
	Reliability []Bin   `json:"reliability"`
	// Curves: per class, precision and coverage (recall) as the score floor
	// rises — what a floor costs.
	Curves map[string][]CurvePoint `json:"curves,omitempty"`
	// Latency per tier ("tier1", "tier2", "decision"), microseconds.
	Latency map[string]Percentiles `json:"latency"`
	// Slices repeat the report per value of a column (--by).
	By     string             `json:"by,omitempty"`
	Slices map[string]*Report `json:"slices,omitempty"`
	// Compare holds tier-1 and tier-2 side by side when both ran.
	Compare *TierComparison `json:"compare,omitempty"`
	// Robustness is how often the decision changes under noise a user
	// adds (eval --robustness).
	Robustness *Robustness `json:"robustness,omitempty"`
}

// ClassReport is one class's figures.
type ClassReport struct {
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
	Support   int     `json:"support"`   // items labelled with the class
	Predicted int     `json:"predicted"` // items predicted (routed) as the class
}

// RouteFigure is one class route's figures (rules mode).
type RouteFigure struct {
	// Taken: items the route took; Right: those whose label it covers.
	Taken int `json:"taken"`
	Right int `json:"right"`
	// Precision is Right over Taken; Recall the share of the items whose
	// label the route is the first to cover (Support) that it took.
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	Support   int     `json:"support"`
}

// Confusion is a labelled count matrix.
type Confusion struct {
	Labels []string `json:"labels"`
	Counts [][]int  `json:"counts"`
}

// Bin is one reliability bin: items whose top score fell in [Lo, Hi).
type Bin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Count      int     `json:"count"`
	Confidence float64 `json:"confidence"` // mean top score
	Accuracy   float64 `json:"accuracy"`
}

// CurvePoint is a class's precision and coverage at one floor.
type CurvePoint struct {
	Floor     float64 `json:"floor"`
	Precision float64 `json:"precision"`
	Coverage  float64 `json:"coverage"` // share of the class's items predicted at or above the floor (recall)
	Count     int     `json:"count"`    // items predicted as the class at or above the floor
}

// Percentiles are latency figures in microseconds.
type Percentiles struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Count int     `json:"count"`
}

// TierComparison puts tier 1 and tier 2 side by side over the items where
// both ran.
type TierComparison struct {
	N         int     `json:"n"`
	Tier1Acc  float64 `json:"tier1_accuracy"`
	Tier2Acc  float64 `json:"tier2_accuracy"`
	Agreement float64 `json:"agreement"`
	Tier1Only int     `json:"tier1_only_right"`
	Tier2Only int     `json:"tier2_only_right"`
}
