package rules

import (
	"strings"
	"testing"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/classifier/classifiertest"
)

// An API key sent over plain http to another host is warned about where
// the url is written; https, loopback and no key are not.
func TestPlainKeyWarning(t *testing.T) {
	for _, tc := range []struct {
		url, key string
		warn     bool
	}{
		{"http://tei.internal:8080", "TEI_KEY", true},
		{"http://10.0.0.7:8080/v1", "TEI_KEY", true},
		{"http://[::1]:8080", "TEI_KEY", false},
		{"http://127.0.0.1:8080", "TEI_KEY", false},
		{"http://localhost:8080", "TEI_KEY", false},
		{"https://tei.internal:8080", "TEI_KEY", false},
		{"http://tei.internal:8080", "", false},
	} {
		w := plainKeyWarning(&RemoteEncoder{URL: tc.url, APIKeyEnv: tc.key})
		if (w != "") != tc.warn {
			t.Errorf("%s with key %q: warning %q, want one: %v", tc.url, tc.key, w, tc.warn)
		}
	}
	s := compile(t, `default: general
tier2:
  encoder: {url: "http://tei.internal:8080", model: m, api_key_env: TEI_KEY}
`, Env{Heads: testHeads(true, nil), Tier1: &classifiertest.Fixed{}, Tier2: func() (classifier.Classifier, error) { return &classifiertest.Fixed{}, nil }})
	var got []string
	for _, w := range s.Warnings() {
		got = append(got, w.Error())
	}
	if all := strings.Join(got, "\n"); !strings.Contains(all, ":3:") || !strings.Contains(all, "api_key_env over plain http to tei.internal:8080") {
		t.Fatalf("warnings:\n%s", all)
	}
}
