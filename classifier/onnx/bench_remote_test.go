//go:build cgo && ort

package onnx

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/triagegw/triage/internal/testenv"
)

// BenchmarkRemoteOverLocal measures what the remote encoder adds at low
// load on loopback: each iteration embeds one text through the gateway's
// path twice, in process (the scheduled USE-lite int8 session) and through
// the remote encoder (the scheduler, an HTTP call to /v1/embeddings on
// loopback, JSON both ways) whose engine runs the same graph in a session
// of its own. Both are measured in the same run, alternately, on short
// texts of dev's kind:
//
//	go test -tags 'nomsgpack ort' -run '^$' -bench RemoteOverLocal -benchtime 2000x -count 5 ./classifier/onnx
//
// It reports each path's median and the median of the per-text
// differences (added-p50-µs); bench/results/2026-12-07-remote-encoder.txt
// has the figures.
func BenchmarkRemoteOverLocal(b *testing.B) {
	requireORT(b)
	dir := filepath.Join(testenv.Models(b, "use-int8/"+ManifestFile), "use-int8")
	local, err := Open(dir, modelsDir(), Options{Schedule: true, MaxConcurrent: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	engine, err := Open(dir, modelsDir(), Options{MaxConcurrent: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer engine.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req embeddingsRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		out := struct {
			Data []item `json:"data"`
		}{}
		for i, text := range req.Input {
			v, err := engine.Features(r.Context(), text, nil)
			if err != nil {
				http.Error(w, "encoder failed", http.StatusInternalServerError)
				return
			}
			out.Data = append(out.Data, item{i, v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	remote, err := NewRemote(engine.Manifest(), RemoteConfig{URL: srv.URL, Model: engine.Manifest().Name}, Options{Schedule: true, MaxConcurrent: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer remote.Close()

	texts := []string{
		"convert a list of integers into a single integer",
		"what are the elements of a valid contract under common law",
		"how do I reverse a linked list in place",
		"is a verbal agreement to sell a house enforceable",
		"explain the difference between a process and a thread",
		"can my landlord keep the deposit for normal wear and tear",
	}
	embed := func(m *Model, text string, dst []float32) ([]float32, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		v, err := m.Features(ctx, text, dst)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		return v, took
	}
	var lv, rv []float32
	for _, t := range texts { // warm both paths and the connection
		lv, _ = embed(local, t, lv)
		rv, _ = embed(remote, t, rv)
	}
	var loc, rem, diff []float64
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t := texts[i%len(texts)]
		i++
		var dl, dr time.Duration
		lv, dl = embed(local, t, lv)
		rv, dr = embed(remote, t, rv)
		loc, rem, diff = append(loc, dl.Seconds()*1e6), append(rem, dr.Seconds()*1e6), append(diff, (dr-dl).Seconds()*1e6)
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(loc), "local-p50-µs")
	b.ReportMetric(med(rem), "remote-p50-µs")
	b.ReportMetric(med(diff), "added-p50-µs")
}
