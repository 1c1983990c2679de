package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ---- tool calls, shared by chat completions and the Messages API ----

// call is the tool call a request is answered with instead of text.
type call struct {
	name string
	args string // the arguments, a compact JSON object
}

// fragments splits the arguments into at most n pieces (at least one), as
// a stream sends them; they concatenate to c.args.
func (c *call) fragments(n int) []string {
	runes := []rune(c.args)
	n = max(1, min(n, len(runes)))
	out := make([]string, n)
	for i := range n {
		out[i] = string(runes[i*len(runes)/n : (i+1)*len(runes)/n])
	}
	return out
}

// ---- wire types of OpenAI's tool calls (field order follows vLLM's) ----

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// toolCallDelta is a streamed piece of a tool call: the first names the
// function, with empty arguments; the others carry only arguments.
type toolCallDelta struct {
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Index    int           `json:"index"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ---- chat completions: tools and tool_choice as vLLM validates them ----

// chatToolCall validates a chat request's tools and tool_choice as vLLM
// does and returns the call that answers it: nil when the request has no
// tools, tool_choice is "none", or the last message is a tool result (the
// model then answers with text). Otherwise the call is to the function
// tool_choice names, else to the first tool.
func chatToolCall(rawTools, rawChoice json.RawMessage, afterTool bool) (*call, error) {
	type tool struct {
		name   string
		params json.RawMessage
	}
	var tools []tool
	if !isNull(rawTools) {
		var items []json.RawMessage
		if json.Unmarshal(rawTools, &items) != nil {
			return nil, fmt.Errorf("tools: Input should be a valid list")
		}
		for i, item := range items {
			var t map[string]json.RawMessage
			if json.Unmarshal(item, &t) != nil {
				return nil, fmt.Errorf("tools.%d: Input should be a valid dictionary", i)
			}
			if typ, ok := t["type"]; ok && string(typ) != `"function"` {
				return nil, fmt.Errorf("tools.%d.type: Input should be 'function'", i)
			}
			var fn map[string]json.RawMessage
			if isNull(t["function"]) {
				return nil, fmt.Errorf("tools.%d.function: Field required", i)
			}
			if json.Unmarshal(t["function"], &fn) != nil {
				return nil, fmt.Errorf("tools.%d.function: Input should be a valid dictionary", i)
			}
			var name string
			if _, ok := fn["name"]; !ok {
				return nil, fmt.Errorf("tools.%d.function.name: Field required", i)
			}
			if json.Unmarshal(fn["name"], &name) != nil {
				return nil, fmt.Errorf("tools.%d.function.name: Input should be a valid string", i)
			}
			if p := fn["parameters"]; !isNull(p) && jsonKind(p) != '{' {
				return nil, fmt.Errorf("tools.%d.function.parameters: Input should be a valid dictionary", i)
			}
			tools = append(tools, tool{name: name, params: fn["parameters"]})
		}
	}

	// vLLM's defaults: "auto" when tools are given, "none" otherwise; an
	// explicit null asks for no tool call and is not checked.
	const usage = `Correct usage: ` + "`" + `{"type": "function", "function": {"name": "my_function"}}` + "`"
	named := ""
	switch {
	case rawChoice == nil:
		if len(tools) == 0 {
			return nil, nil
		}
	case isNull(rawChoice) || string(bytes.TrimSpace(rawChoice)) == `"none"`:
		return nil, nil
	case isNull(rawTools):
		return nil, fmt.Errorf("When using `tool_choice`, `tools` must be set.")
	case jsonKind(rawChoice) == '{':
		var choice map[string]json.RawMessage
		_ = json.Unmarshal(rawChoice, &choice)
		var fn map[string]json.RawMessage
		if json.Unmarshal(choice["function"], &fn) != nil || fn == nil {
			return nil, fmt.Errorf("Invalid value for `function`: `%s` in `tool_choice`! %s", compact(choice["function"]), usage)
		}
		if _, ok := fn["name"]; !ok {
			return nil, fmt.Errorf("Expected field `name` in `function` in `tool_choice`! %s", usage)
		}
		if json.Unmarshal(fn["name"], &named) != nil || named == "" {
			return nil, fmt.Errorf("Invalid `name` in `function`: `%s` in `tool_choice`! %s", compact(fn["name"]), usage)
		}
		found := false
		for _, t := range tools {
			found = found || t.name == named
		}
		if !found {
			return nil, fmt.Errorf("The tool specified in `tool_choice` does not match any of the specified `tools`")
		}
	default:
		var s string
		if json.Unmarshal(rawChoice, &s) != nil || (s != "auto" && s != "required") {
			return nil, fmt.Errorf(`Invalid value for `+"`tool_choice`"+`: %s! Only named tools, "none", "auto" or "required" are supported.`, compact(rawChoice))
		}
	}
	if len(tools) == 0 || afterTool {
		return nil, nil
	}
	t := tools[0]
	for _, u := range tools {
		if named != "" && u.name == named {
			t = u
			break
		}
	}
	return &call{name: t.name, args: arguments(t.params)}, nil
}

// ---- arguments from a JSON schema ----

// arguments builds the arguments of a call to a function whose parameters
// are schema, deterministically: a JSON object holding each required
// property (each property when none is required), in the schema's order,
// with a value of its type (see sampleValue).
func arguments(schema json.RawMessage) string {
	var top struct {
		Properties json.RawMessage `json:"properties"`
		Required   json.RawMessage `json:"required"`
	}
	if json.Unmarshal(schema, &top) != nil {
		return "{}"
	}
	names, props := objectKeys(top.Properties)
	var required []string
	if json.Unmarshal(top.Required, &required) == nil && len(required) > 0 {
		names = dedupe(required)
	}
	b := []byte{'{'}
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(name)
		b = append(b, k...)
		b = append(b, ':')
		b = append(b, sampleValue(props[name], 0)...)
	}
	return string(append(b, '}'))
}

// sampleValue is the value given to a property of schema: its first enum
// value, its const, or by its type (the first that is not "null" when it
// lists several): "sim" for a string, 1 for a number or an integer, true
// for a boolean, [] for an array, {} for an object, null for null. A
// schema with none of these takes the value of its first anyOf or oneOf
// alternative, and "sim" when it has none.
func sampleValue(schema json.RawMessage, depth int) []byte {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		Enum  []json.RawMessage `json:"enum"`
		Const json.RawMessage   `json:"const"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
	}
	_ = json.Unmarshal(schema, &s)
	if len(s.Enum) > 0 {
		return []byte(compact(s.Enum[0]))
	}
	if s.Const != nil {
		return []byte(compact(s.Const))
	}
	var types []string
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		types = []string{one}
	} else {
		_ = json.Unmarshal(s.Type, &types)
	}
	typ := ""
	for _, t := range types {
		if t != "null" || typ == "" {
			typ = t
		}
		if t != "null" {
			break
		}
	}
	switch typ {
	case "string":
		return []byte(`"sim"`)
	case "number", "integer":
		return []byte(`1`)
	case "boolean":
		return []byte(`true`)
	case "array":
		return []byte(`[]`)
	case "object":
		return []byte(`{}`)
	case "null":
		return []byte(`null`)
	}
	if alts := append(s.AnyOf, s.OneOf...); len(alts) > 0 && depth < 8 {
		return sampleValue(alts[0], depth+1)
	}
	return []byte(`"sim"`)
}

// objectKeys returns the keys of a JSON object in their order, and their
// values; nothing when raw is not an object.
func objectKeys(raw json.RawMessage) ([]string, map[string]json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	var names []string
	values := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil, nil
		}
		if _, dup := values[name]; !dup {
			names = append(names, name)
		}
		values[name] = v
	}
	return names, values
}

func dedupe(names []string) []string {
	seen := map[string]bool{}
	out := names[:0:0]
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// isNull reports whether raw is absent or the JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// jsonKind is the first byte of the JSON value raw: '{', '[', '"', 't',
// 'f', 'n', or the first of a number; 0 when raw is empty.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// compact is raw without insignificant whitespace, for messages.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
