package router

import (
	"context"
	"errors"
	"net/http"

	"github.com/triagegw/triage/router/openai"
	"github.com/triagegw/triage/rules"
)

// Decision is where one request goes, and why.
type Decision struct {
	// Pool names the pool that serves the request; Fallback, when set,
	// takes over if Pool has no replica available.
	Pool, Fallback string
	// Reason says why, for the access log and the response headers:
	// ReasonExplicitModel or ReasonDefault here; semantic routing adds its
	// own (tier1_confident, below_floor, ...).
	Reason string
	// Route, Class, Score and Tier explain a semantic decision: the route
	// taken and the verdict of the tier that decided (Tier 0: none ran).
	Route string
	Class string
	Score float32
	Tier  int
	// Semantic is set when the request named a routing alias.
	Semantic bool
}

// Reasons of the built-in decider.
const (
	ReasonExplicitModel = "explicit_model" // a pool serves the model (or alias) the client named
	ReasonDefault       = "default"        // no pool does; the default pool takes it
)

// ErrUnknownModel is returned by a Decider when no pool serves the model and
// there is no default pool: the client gets 404 model_not_found.
var ErrUnknownModel = errors.New("router: no pool serves the model")

// Input is what a Decider sees of a request. Body and Req point into the
// request's body buffer and are valid only during Decide. It is passed by
// value so it stays off the heap.
type Input struct {
	Req    openai.Request
	Body   []byte
	Header http.Header
}

// Decider chooses the pool for a request. The gateway's built-in decider
// maps model names and aliases to pools; semantic routing plugs in here to
// route the configured alias by what the prompt is about. A Decider belongs
// to one config snapshot and must be safe for concurrent use.
type Decider interface {
	Decide(ctx context.Context, in Input) (Decision, error)
}

// ruled routes requests naming a rules alias by subject, and the rest by
// the model table.
type ruled struct {
	set   *rules.Set
	table *modelTable
}

func (d *ruled) Decide(ctx context.Context, in Input) (Decision, error) {
	if !d.set.IsAlias(in.Req.Model) {
		return d.table.Decide(ctx, in)
	}
	r := d.set.Decide(ctx, rules.Input{Req: in.Req, Body: in.Body, Header: in.Header})
	return Decision{Pool: r.Pool, Fallback: r.Fallback, Reason: r.Reason, Route: r.Route, Class: r.Class, Score: r.Score, Tier: r.Tier, Semantic: true}, nil
}

// modelTable is the built-in Decider: the model name, or an alias, picks
// the pool; anything else goes to the default pool when there is one.
type modelTable struct {
	models map[string]*poolEntry
	def    *poolEntry
}

func (m *modelTable) Decide(_ context.Context, in Input) (Decision, error) {
	var e *poolEntry
	var ok bool
	if in.Req.ModelEscaped {
		e, ok = m.models[in.Req.ModelName()]
	} else {
		e, ok = m.models[string(in.Req.Model)] // no allocation
	}
	switch {
	case ok:
		return Decision{Pool: e.pool.Name(), Reason: ReasonExplicitModel}, nil
	case m.def != nil:
		return Decision{Pool: m.def.pool.Name(), Reason: ReasonDefault}, nil
	}
	return Decision{}, ErrUnknownModel
}
