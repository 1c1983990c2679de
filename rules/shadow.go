package rules

import "time"

// ShadowRecord is one line of the shadow decision log: a sampled live
// request, the decision that routed it and the one the shadow rule set
// would have made. It holds no prompt text.
type ShadowRecord struct {
	Time      time.Time  `json:"time"`
	RequestID string     `json:"request_id"`
	Model     string     `json:"model"`
	Live      ShadowSide `json:"live"`
	Shadow    ShadowSide `json:"shadow"`
}

// ShadowSide is one side's decision, the version of the rules that made
// it and how long it took, in microseconds.
type ShadowSide struct {
	Decision
	Version string  `json:"version"`
	Micros  float64 `json:"us"`
}
