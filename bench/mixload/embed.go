package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// cmdEmbed drives an encoder service (triage encode serve, or any engine
// of the OpenAI embeddings API) closed loop: -c workers, each sending
// -batch texts a request from a JSONL file of texts, for -d. It reports
// texts encoded a second, request latencies, the tokens a text (the
// answers' usage), what was refused, and, with -enc-pid, the service's
// CPU: texts per core-second, the figure capacity planning divides by.
func cmdEmbed(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("embed", flag.ExitOnError)
	url := fs.String("url", "http://127.0.0.1:9100/v1/embeddings", "the embeddings endpoint (loopback only)")
	model := fs.String("model", "use-lite-int8", "the model name to send")
	textsPath := fs.String("texts", "", "JSONL of {\"text\": ...} (labelled datasets are fine), sent in file order, cycled")
	minBytes := fs.Int("min-bytes", 0, "only texts of at least this many bytes")
	maxBytes := fs.Int("max-bytes", 0, "only texts of at most this many bytes (0: any)")
	conc := fs.Int("c", 8, "workers, one keep-alive connection each")
	batch := fs.Int("batch", 1, "texts a request")
	dur := fs.Duration("d", 10*time.Second, "measured duration")
	warm := fs.Duration("warmup", 2*time.Second, "unrecorded load first")
	timeout := fs.Float64("request-timeout", 0, "X-Request-Timeout to send, in seconds (0: none)")
	encPID := fs.Int("enc-pid", 0, "the service's pid: its CPU over the measured window")
	label := fs.String("label", "", "a label for the report line")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	fs.Parse(args)
	if *textsPath == "" {
		return errors.New("embed: -texts is required")
	}
	if err := checkLoopback(*url); err != nil {
		return err
	}
	texts, err := readEmbedTexts(*textsPath, *minBytes, *maxBytes)
	if err != nil {
		return err
	}
	bodies := make([][]byte, 0, len(texts)/max(*batch, 1)+1)
	for i := 0; i+*batch <= len(texts); i += *batch {
		b, _ := json.Marshal(map[string]any{"model": *model, "input": texts[i : i+*batch], "encoding_format": "base64"})
		bodies = append(bodies, b)
	}
	if len(bodies) == 0 {
		return fmt.Errorf("embed: %d texts, fewer than one batch of %d", len(texts), *batch)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: *conc * 2, MaxConnsPerHost: *conc, DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var cursor atomic.Int64
	type result struct {
		lat            []time.Duration
		ok, tokens     int64
		byStatus       map[int]int64
		errors         int64
		errSample      string
		textsOK, bytes int64
	}
	run := func(d time.Duration) (*result, time.Duration) {
		var mu sync.Mutex
		res := &result{byStatus: map[int]int64{}}
		deadline := time.Now().Add(d)
		start := time.Now()
		var wg sync.WaitGroup
		for range *conc {
			wg.Go(func() {
				var lat []time.Duration
				var ok, toks, textsOK, nbytes, errs int64
				st := map[int]int64{}
				sample := ""
				for time.Now().Before(deadline) {
					i := int(cursor.Add(1)-1) % len(bodies)
					req, _ := http.NewRequest(http.MethodPost, *url, bytes.NewReader(bodies[i]))
					req.Header.Set("Content-Type", "application/json")
					if *timeout > 0 {
						req.Header.Set("X-Request-Timeout", fmt.Sprint(*timeout))
					}
					t0 := time.Now()
					resp, err := cl.Do(req)
					if err != nil {
						errs++
						sample = err.Error()
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					st[resp.StatusCode]++
					if resp.StatusCode != http.StatusOK {
						continue
					}
					lat = append(lat, time.Since(t0))
					var a struct {
						Data  []json.RawMessage `json:"data"`
						Usage struct {
							PromptTokens int64 `json:"prompt_tokens"`
						} `json:"usage"`
					}
					if json.Unmarshal(b, &a) != nil || len(a.Data) != *batch {
						errs++
						sample = "an answer that is not an embeddings list of the batch"
						continue
					}
					ok++
					textsOK += int64(len(a.Data))
					toks += a.Usage.PromptTokens
					nbytes += int64(len(bodies[i]))
				}
				mu.Lock()
				res.lat = append(res.lat, lat...)
				res.ok += ok
				res.tokens += toks
				res.textsOK += textsOK
				res.bytes += nbytes
				res.errors += errs
				if sample != "" {
					res.errSample = sample
				}
				for k, v := range st {
					res.byStatus[k] += v
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return res, time.Since(start)
	}
	if *warm > 0 {
		run(*warm)
	}
	watch := startWatch(*encPID, 200*time.Millisecond)
	res, elapsed := run(*dur)
	var cpu float64
	var rss int64
	if watch != nil {
		_, rss, cpu = watch.finish()
	}
	slices.Sort(res.lat)
	q := func(p float64) float64 {
		if len(res.lat) == 0 {
			return 0
		}
		return float64(res.lat[min(len(res.lat)-1, int(p*float64(len(res.lat))))].Microseconds()) / 1000
	}
	out := map[string]any{
		"label": *label, "c": *conc, "batch": *batch, "duration_s": round3(elapsed.Seconds()),
		"texts_per_s":     round2(float64(res.textsOK) / elapsed.Seconds()),
		"tokens_per_text": round2(float64(res.tokens) / max(float64(res.textsOK), 1)),
		"p50_ms":          q(0.5), "p99_ms": q(0.99),
		"by_status": res.byStatus, "errors": res.errors, "err_sample": res.errSample,
		"enc_cpu_s": cpu, "enc_cores": round2(cpu / elapsed.Seconds()), "enc_rss_mib": rss >> 10,
	}
	if cpu > 0 {
		out["texts_per_core_s"] = round2(float64(res.textsOK) / cpu)
	}
	if *asJSON {
		b, _ := json.Marshal(out)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "%s c=%d batch=%d: %.0f texts/s, %.1f tokens a text, request p50/p99 %.2f / %.2f ms, encoder %.2f cores, %v texts per core-second, statuses %v, errors %d\n",
		*label, *conc, *batch, out["texts_per_s"], out["tokens_per_text"], q(0.5), q(0.99), out["enc_cores"], out["texts_per_core_s"], res.byStatus, res.errors)
	return nil
}

// readEmbedTexts reads the "text" of each JSONL line whose length is within
// the bounds, in file order.
func readEmbedTexts(path string, minB, maxB int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r struct{ Text string }
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Text == "" {
			continue
		}
		if len(r.Text) < minB || (maxB > 0 && len(r.Text) > maxB) {
			continue
		}
		out = append(out, r.Text)
	}
	return out, sc.Err()
}
