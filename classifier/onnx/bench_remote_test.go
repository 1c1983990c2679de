//go:build cgo && ort

package onnx

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/triagegw/triage/classifier"
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

// BenchmarkRemoteAnswer: what reading an engine's answer costs the
// gateway, per call of 8 texts of USE lite's 512 dims, as JSON numbers
// and as base64 (what the client asks for). bench/results/2026-12-07-encoder-service.md
// has the figures.
func BenchmarkRemoteAnswer(b *testing.B) {
	const texts, dims = 8, 512
	vecs := make([][]float32, texts)
	for i := range vecs {
		vecs[i] = make([]float32, dims)
		for k := range vecs[i] {
			vecs[i][k] = float32(math.Sin(float64(i*dims+k))) / 22.6
		}
		classifier.L2Normalize(vecs[i])
	}
	for _, format := range []string{"float", "base64"} {
		type item struct {
			Index     int `json:"index"`
			Embedding any `json:"embedding"`
		}
		var out struct {
			Data []item `json:"data"`
		}
		for i, v := range vecs {
			var e any = v
			if format == "base64" {
				var raw []byte
				for _, f := range v {
					raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
				}
				e = base64.StdEncoding.EncodeToString(raw)
			}
			out.Data = append(out.Data, item{i, e})
		}
		body, _ := json.Marshal(out)
		b.Run(format, func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			md, err := NewRemote(Manifest{Format: 1, Name: "m", Input: InputUSE, Pooling: PoolNone, Dims: dims, MaxTokens: 128, Tokenizer: "x"},
				RemoteConfig{URL: srv.URL, Model: "m"}, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer md.Close()
			in := make([]string, texts)
			for i := range in {
				in[i] = "how do I reverse a linked list in place"
			}
			dst := make([][]float32, texts)
			for i := range dst {
				dst[i] = make([]float32, dims)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := md.remote.embed(context.Background(), in, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
