package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/progress"
)

// Training's log lines pass through as they come; off a terminal the epoch
// lines are printed too, with the epochs done and the time left every 15 s.
func TestTrainLogCountsEpochs(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	plain := false
	var out bytes.Buffer
	l := newTrainLog(&out, 2*10, progress.Options{Terminal: &plain, Now: func() time.Time { return now }})
	fmt.Fprintf(l, "train: 900 rows, 3 classes; 810 to fit, 90 held out for calibration\n")
	for m := 1; m <= 2; m++ {
		for e := 1; e <= 10; e++ {
			now = now.Add(2 * time.Second)
			// Written in pieces, as a writer may be.
			line := fmt.Sprintf("train: model %d/2 epoch %d/10 loss 0.5 (%ds)\n", m, e, 2*(10*(m-1)+e))
			l.Write([]byte(line[:7]))
			l.Write([]byte(line[7:]))
		}
	}
	fmt.Fprintf(l, "train: fitted in 40s\n")
	l.finish()
	got := out.String()
	for _, want := range []string{
		"train: 900 rows, 3 classes; 810 to fit, 90 held out for calibration\ntrain: model 1/2 epoch 1/10 loss 0.5 (2s)\n",
		"train: model 2/2 epoch 10/10 loss 0.5 (40s)\n",
		"train: tier 1: 8/20 epochs (40%), 0.50 epochs/s, about 24s left\n",
		"train: fitted in 40s\ntrain: tier 1: 20 epochs in 40s (0.50 epochs/s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("training log lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "epoch "); n != 20 {
		t.Errorf("%d epoch lines, want 20:\n%s", n, got)
	}
}
