package pool

import (
	"hash/crc32"
	"math"
	"strconv"
)

// The balancing policies (Config.Balance).
const (
	// BalanceP2C is weighted power-of-two-choices on in-flight requests.
	BalanceP2C = "p2c"
	// BalanceRoundRobin gives each available replica a request in turn,
	// whatever its weight or load.
	BalanceRoundRobin = "round_robin"
	// BalancePrefix sends a request to the replica holding the longest
	// prefix of its conversation, within a bound on load (Prefix).
	BalancePrefix = "prefix"
)

// Balances lists the policy names Config.Balance accepts.
var Balances = []string{BalanceP2C, BalanceRoundRobin, BalancePrefix}

type policy uint8

const (
	policyP2C policy = iota
	policyRoundRobin
	policyPrefix
)

func policyOf(name string) policy {
	switch name {
	case BalanceRoundRobin:
		return policyRoundRobin
	case BalancePrefix:
		return policyPrefix
	}
	return policyP2C
}

// Choice is why Pick gave the replica it did, for metrics and the
// x-triage-replica-choice header. Its String is the name below.
type Choice uint8

const (
	ChoiceP2C        Choice = iota // "p2c": power of two choices on load
	ChoiceRoundRobin               // "round_robin": the next replica in turn
	ChoiceHit                      // "prefix_hit": the replica holding the longest prefix of the conversation
	ChoiceMiss                     // "prefix_miss": no replica holds a block of it; its home by rendezvous order, within the load bound
	ChoiceLoad                     // "prefix_load": the replica holding it is over the load bound; the next in rendezvous order that is not
	ChoicePreferred                // "preferred": the replica named by PickNamed (a Responses chain)
	ChoiceOnly                     // "only": a single replica could take it
)

var choiceNames = [...]string{"p2c", "round_robin", "prefix_hit", "prefix_miss", "prefix_load", "preferred", "only"}

// Choices lists every Choice, for metrics made in advance.
var Choices = []Choice{ChoiceP2C, ChoiceRoundRobin, ChoiceHit, ChoiceMiss, ChoiceLoad, ChoicePreferred, ChoiceOnly}

func (c Choice) String() string {
	if int(c) < len(choiceNames) {
		return choiceNames[c]
	}
	return "Choice(" + strconv.Itoa(int(c)) + ")"
}

// backendSeed is a replica's part of its rendezvous scores: a hash of its
// URL, the same on every gateway given the same config.
func backendSeed(name string) uint64 {
	return mix64(uint64(crc32.Checksum([]byte(name), castagnoli))<<32 | uint64(len(name)))
}

// Load is what prefix affinity weighs b by: the requests the gateway has
// in flight to it, or, while the replica's own /metrics is fresh, its
// running and waiting requests as last scraped plus those this gateway
// sent since (so other gateways' traffic counts too), whichever is more.
func (b *Backend) Load(now int64) int64 {
	in := b.inflight.Load()
	if until := b.queueUntil.Load(); until == 0 || now >= until {
		return in
	}
	q := b.queue.Load() + in - b.queueBase.Load()
	return max(q, in)
}

// choosePrefix is the prefix policy's choice among the available
// replicas:
//  1. each available replica's longest run of k's blocks in its index,
//     and its load against the bound ceil(LoadFactor × (total+1) × its
//     share of the weight) of consistent hashing with bounded loads;
//  2. the replica with the longest match, when that match covers more
//     than the shared blocks (k.Shared: the conversation itself was sent
//     there) and the replica is within the bound: a hit (ties go to the
//     higher rendezvous score);
//  3. else the replica with the highest rendezvous score for k.Conv that
//     is within the bound: the conversation's home, the same on every
//     gateway; a hit if it holds some of the prompt (a shared system
//     prompt), a miss if none, an override for load when step 2's replica
//     was over the bound;
//  4. else (weights and rounding leave none within) the least loaded per
//     unit of weight.
//
// The chosen replica's index then records k.
func (p *Pool) choosePrefix(k *Key, avail func(*Backend) bool) (*Backend, Choice) {
	var now int64
	if p.scrapes {
		now = p.now().UnixNano()
	}
	var total, weights int64
	n := 0
	// A replica's score is twice its match, plus one when it was sent the
	// conversation: it must beat twice the shared blocks.
	var best *Backend
	bestLen, bestRank := 2*k.Shared, 0.0
	for _, b := range p.backends {
		if !avail(b) {
			if p.dropIdle(b) {
				b.idx.clear()
			}
			continue
		}
		n++
		total += b.Load(now)
		weights += b.Weight
		m := 2 * b.idx.match(k)
		if m >= 2*k.Shared && b.idx.has(convTag(k.Conv)) {
			m++
		}
		if m > 2*k.Shared && m >= bestLen {
			r := rank(k.Conv, b)
			if m > bestLen || r > bestRank {
				best, bestLen, bestRank = b, m, r
			}
		}
	}
	if n == 0 {
		return nil, ChoiceMiss
	}
	factor := p.cfg.Prefix.LoadFactor
	within := func(b *Backend) bool {
		bound := math.Ceil(factor * float64(total+1) * float64(b.Weight) / float64(weights))
		return float64(b.Load(now)+1) <= bound
	}
	var chosen *Backend
	choice := ChoiceMiss
	switch {
	case best != nil && within(best):
		chosen, choice = best, ChoiceHit
	default:
		top := -1.0
		for _, b := range p.backends {
			if b == best || !avail(b) || !within(b) {
				continue
			}
			if r := rank(k.Conv, b); r > top {
				chosen, top = b, r
			}
		}
		if chosen == nil {
			var load, w int64 = 0, 1
			for _, b := range p.backends {
				if avail(b) && (chosen == nil || b.Load(now)*w < load*b.Weight) {
					chosen, load, w = b, b.Load(now), b.Weight
				}
			}
		}
		if chosen == nil {
			// Every replica counted above went down or was ejected
			// since: health changes under a pick.
			return nil, ChoiceMiss
		}
		switch {
		case best != nil:
			choice = ChoiceLoad
		case k.N > 0 && chosen.idx.has(k.Blocks[0]):
			choice = ChoiceHit
		}
	}
	chosen.idx.add(k)
	return chosen, choice
}

// dropIdle reports whether b's index should be forgotten: b is down or
// ejected, so its cache is gone or will be cold when it returns.
func (p *Pool) dropIdle(b *Backend) bool {
	return b.idx != nil && (b.health.Load() == healthDown || b.openUntil.Load() != 0)
}

// chooseRoundRobin gives the next available replica after the last one
// given.
func (p *Pool) chooseRoundRobin(avail func(*Backend) bool) *Backend {
	n := uint64(len(p.backends))
	start := p.rr.Add(1)
	for i := range n {
		if b := p.backends[(start+i)%n]; avail(b) {
			return b
		}
	}
	return nil
}
