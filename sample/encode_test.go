package sample

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
	"github.com/triagegw/triage/rules"
)

// fullDecision has every field of rules.Decision set: a field added to it
// that appendRecord does not write fails TestAppendRecordIsJSON.
func fullDecision() rules.Decision {
	var d rules.Decision
	v := reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x<" + v.Type().Field(i).Name + ">\"\\")
		case reflect.Float32:
			f.SetFloat(0.125 + float64(i))
		case reflect.Int:
			f.SetInt(int64(i))
		case reflect.Bool:
			f.SetBool(true)
		default:
			panic("rules.Decision has a field of a kind appendRecord does not write: " + f.Kind().String())
		}
	}
	return d
}

func TestAppendRecordIsJSON(t *testing.T) {
	for _, r := range []Record{
		{Time: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC), Text: "plain", Decision: rules.Decision{Pool: "general", Reason: "default"}, RulesVersion: "v"},
		{Time: time.Date(2026, 5, 1, 10, 42, 17, 5, time.UTC), Text: "tab\t nl\n ctl\x01 quote\" bs\\ <b>&amp; é \u2028 bad\xff end",
			Truncated: true, Decision: fullDecision(), RouteClasses: []string{"law", "computer science"},
			Tiers:        map[string][]classifier.Scored{"1": {{Class: "law", Score: 0.9999787}, {Class: "health", Score: 9.602545e-06}}, "2": {{Class: "law", Score: 1e-7}, {Class: "x", Score: 3e21}}},
			RulesVersion: "25b2fb4191d6", Principal: "team-legal"},
		{Time: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC), Tiers: map[string][]classifier.Scored{"1": nil}},
	} {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		got := appendRecord(nil, &r)
		if !bytes.Equal(got, want) {
			t.Errorf("appendRecord =\n%s\njson.Marshal =\n%s", got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("a\"b\\c<d>&e\u2028\xff\x00")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}
