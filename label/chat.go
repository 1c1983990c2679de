package label

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ChatClient asks a model through an OpenAI-compatible chat completions
// endpoint: the gateway's, naming a pool as the model, so that its access
// control, limits, metrics and logs see every call.
type ChatClient struct {
	// URL is the gateway's base URL (http://host:port); the request goes
	// to URL/v1/chat/completions.
	URL string
	// Model is the pool (or its model name, or an alias) to ask.
	Model string
	// Key is sent as a bearer token when set (the gateway's API key).
	Key string
	// MaxTokens caps each answer. Default 16: a class name.
	MaxTokens int
	// HTTP is the client; nil: one with a 60s timeout per call.
	HTTP *http.Client
}

// StatusError is an answer other than 200.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("status %d: %s", e.Code, e.Message)
}

// Ask sends one chat completion at temperature 0 (the same answer to the
// same prompt, as far as the model allows): system, then the prompt as
// the user's message. The answer is the first choice's content; its
// tokens the usage's total.
func (c *ChatClient) Ask(ctx context.Context, system, prompt string) (Answer, error) {
	maxTokens := c.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 16
	}
	body, err := json.Marshal(map[string]any{
		"model":       c.Model,
		"temperature": 0,
		"max_tokens":  maxTokens,
		"stream":      false,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": prompt},
		},
	})
	if err != nil {
		return Answer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return Answer{}, &StatusError{Code: resp.StatusCode, Message: msg}
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		// A 200 that is not a completion is an answer that says nothing:
		// not a class.
		return Answer{Tokens: maxTokens}, nil
	}
	a := Answer{Tokens: out.Usage.Total}
	if a.Tokens == 0 {
		a.Tokens = maxTokens + len(prompt)/4 + len(system)/4 // no usage: what it may have cost
	}
	if len(out.Choices) > 0 && out.Choices[0].Message.Content != nil {
		a.Text = *out.Choices[0].Message.Content
	}
	return a, nil
}

// Refusal reports whether err is an answer no retry changes: the key or
// the model refused (401, 403, 404).
func Refusal(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == 401 || se.Code == 403 || se.Code == 404)
}
