package label

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Instruction is the fixed system message a model is asked to label with:
// the classes, one answer, nothing else. It is part of the documented
// contract (docs/own-traffic-workflow.md): change it and the agreement
// measured with it no longer holds.
func Instruction(classes []string) string {
	return "You sort the prompts people send to an AI assistant by subject. " +
		"The user message is one such prompt; do not answer it. " +
		"Reply with exactly one of these classes, and nothing else: " + strings.Join(classes, ", ") + ". " +
		`Reply "` + Other + `" when none of the others fits.`
}

// ParseAnswer reads a model's answer strictly: one of the classes,
// compared without case after trimming white space, and nothing else;
// ok is false for anything else (a sentence, two classes, a class with
// punctuation), which is "not sure".
func ParseAnswer(answer string, classes []string) (class string, ok bool) {
	a := strings.TrimSpace(answer)
	for _, c := range classes {
		if strings.EqualFold(a, c) {
			return c, true
		}
	}
	return "", false
}

// Answer is what a model said to one prompt, and the tokens the call
// cost (prompt and completion, as its usage reports them).
type Answer struct {
	Text   string
	Tokens int
}

// Asker asks a model: the system message, then the prompt as the user's.
type Asker func(ctx context.Context, system, prompt string) (Answer, error)

// ProposeOptions configure Propose.
type ProposeOptions struct {
	// Ask asks the model (ChatClient.Ask).
	Ask Asker
	// Labeller names the model in each label ("model:POOL").
	Labeller string
	// Concurrency bounds the calls in flight. Default 4.
	Concurrency int
	// MaxTokensTotal bounds the tokens all calls may cost: a call starts
	// only when the tokens spent, plus what the calls in flight may still
	// cost (Reserve each), plus its own Reserve, fit. 0: no bound.
	MaxTokensTotal int
	// Reserve is what one call may cost at most, as counted against
	// MaxTokensTotal before its usage is known: estimated from the
	// prompt by the caller. Nil: 0.
	Reserve func(prompt string) int
	// MaxFailures stops Propose after this many failed calls in a row
	// (the pool is down, the key refused). Default 10.
	MaxFailures int
}

// ProposeStats count what Propose did.
type ProposeStats struct {
	Asked    int // calls answered
	Labelled int // answers that were a class
	Unsure   int // answers that were not: marked not sure
	Failed   int // calls that failed: left pending, asked again next time
	Tokens   int // tokens the answered calls cost
	// Budget: items left pending because the token budget would not
	// cover them.
	Budget int
}

// ErrFailing stops Propose when calls fail MaxFailures times in a row.
var ErrFailing = errors.New("the model's calls keep failing")

// Propose asks a model for a label of every pending item of s, at most
// Concurrency at a time and within MaxTokensTotal, and records each
// answer as it comes (Session.Record): a class as a label by Labeller,
// anything else as "not sure" by Labeller. A failed call leaves its item
// pending. It returns when every item was asked, the budget is spent,
// ctx ends, or calls keep failing (ErrFailing, wrapping the last error;
// at once on a refusal: 401, 403, 404).
func Propose(ctx context.Context, s *Session, o ProposeOptions) (ProposeStats, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.MaxFailures <= 0 {
		o.MaxFailures = 10
	}
	reserve := func(p string) int {
		if o.Reserve == nil {
			return 0
		}
		return o.Reserve(p)
	}
	system := Instruction(s.classes)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		st       ProposeStats
		reserved int // tokens the calls in flight may cost
		inARow   int
		stopErr  error
	)
	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	pending := s.Pending()
	for k, it := range pending {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		r := reserve(it.Text)
		mu.Lock()
		if o.MaxTokensTotal > 0 && st.Tokens+reserved+r > o.MaxTokensTotal {
			mu.Unlock()
			<-sem
			wg.Wait() // what the calls in flight cost decides whether more fit
			mu.Lock()
			fits := st.Tokens+r <= o.MaxTokensTotal
			mu.Unlock()
			if !fits {
				st.Budget = len(pending) - k
				break
			}
			sem <- struct{}{}
			mu.Lock()
		}
		reserved += r
		mu.Unlock()
		wg.Go(func() {
			defer func() { <-sem }()
			a, err := o.Ask(ctx, system, it.Text)
			mu.Lock()
			defer mu.Unlock()
			reserved -= r
			if err != nil {
				if ctx.Err() == nil {
					st.Failed++
					inARow++
					switch {
					case stopErr != nil:
					case Refusal(err): // the key or the pool refused: no call will do better
						stopErr = fmt.Errorf("%w: %w", ErrFailing, err)
						cancel()
					case inARow >= o.MaxFailures:
						stopErr = fmt.Errorf("%w: %d in a row, the last: %w", ErrFailing, inARow, err)
						cancel()
					}
				}
				return
			}
			inARow = 0
			st.Asked++
			st.Tokens += a.Tokens
			class, ok := ParseAnswer(a.Text, s.classes)
			if err := s.Record(it.ID, class, o.Labeller); err != nil {
				if stopErr == nil {
					stopErr = err
					cancel()
				}
				return
			}
			if ok {
				st.Labelled++
			} else {
				st.Unsure++
			}
		})
	}
	wg.Wait()
	if stopErr != nil {
		return st, stopErr
	}
	return st, ctx.Err()
}
