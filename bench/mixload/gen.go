package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
)

// chatBody is the chat completion each text becomes, the shape the bench
// harness sends (../shared/bench's body: model, one user message,
// max_tokens).
type chatBody struct {
	Model     string    `json:"model"`
	Messages  []message `json:"messages"`
	MaxTokens int       `json:"max_tokens"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func cmdGen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	out := fs.String("out", "-", "write the bodies here, one a line ('-': standard output)")
	seed := fs.Uint64("seed", 1, "seed of the shuffle: the same inputs and seed give the same file")
	model := fs.String("model", "gpt-4o-mini", "the model every body names")
	maxTokens := fs.Int("max-tokens", 64, "max_tokens of every body")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mixload gen [-out FILE] [-seed N] [-model NAME] FILE.jsonl ...")
		fmt.Fprintln(fs.Output(), "Each input line is a JSON object with a \"text\"; texts are deduplicated across the files,")
		fmt.Fprintln(fs.Output(), "shuffled with the seed, and written as chat completion bodies.")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("gen: no input files")
	}
	seen := map[string]bool{}
	var texts []string
	var from []string
	for _, path := range fs.Args() {
		rows, added, err := readTexts(path, seen, &texts)
		if err != nil {
			return err
		}
		from = append(from, fmt.Sprintf("%s (%d rows, %d new texts)", path, rows, added))
	}
	if len(texts) == 0 {
		return errors.New("gen: no texts in the inputs")
	}
	r := rand.New(rand.NewPCG(*seed, 0x6d69786c6f6164)) // "mixload"
	r.Shuffle(len(texts), func(i, j int) { texts[i], texts[j] = texts[j], texts[i] })

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, t := range texts {
		if err := enc.Encode(chatBody{Model: *model, Messages: []message{{Role: "user", Content: t}}, MaxTokens: *maxTokens}); err != nil {
			return err
		}
	}
	if *out == "-" {
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return err
		}
	} else if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "mixload gen: %d bodies, %d distinct texts, seed %d, from %s\n", len(texts), len(texts), *seed, strings.Join(from, ", "))
	return nil
}

// readTexts appends path's texts not seen before to texts, and returns
// how many rows it read and how many texts were new.
func readTexts(path string, seen map[string]bool, texts *[]string) (rows, added int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(b, &row); err != nil {
			return rows, added, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if row.Text == nil {
			return rows, added, fmt.Errorf("%s:%d: no \"text\"", path, line)
		}
		rows++
		t := *row.Text
		if strings.TrimSpace(t) == "" || seen[t] {
			continue
		}
		seen[t] = true
		*texts = append(*texts, t)
		added++
	}
	if err := sc.Err(); err != nil {
		return rows, added, fmt.Errorf("%s: %w", path, err)
	}
	if rows == 0 {
		return 0, 0, fmt.Errorf("%s: no rows", path)
	}
	return rows, added, nil
}
