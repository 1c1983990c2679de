package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// base is the image the Dockerfile's final stage starts FROM, for which
// the base layer stands in: the same Debian packages, users and
// environment.
const base = "gcr.io/distroless/cc-debian12:nonroot"

// instruction is one line of a Dockerfile, continuations joined.
type instruction struct {
	line int    // of its first line
	cmd  string // upper case: COPY, ENV, ...
	args string // the rest, trimmed
}

// finalStage returns the instructions after the Dockerfile's last FROM,
// and what that FROM names.
func finalStage(path string) (from string, stage []instruction, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	var all []instruction
	var cur *instruction
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cur == nil && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur != nil && strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		more := strings.HasSuffix(line, "\\")
		line = strings.TrimSuffix(line, "\\")
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{line: n, cmd: strings.ToUpper(cmd), args: args}
		} else {
			cur.args += " " + line
		}
		if !more {
			cur.args = strings.TrimSpace(cur.args)
			all = append(all, *cur)
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", nil, err
	}
	if cur != nil {
		return "", nil, fmt.Errorf("%s:%d: the last instruction ends with a continuation", path, cur.line)
	}
	last := -1
	for i, in := range all {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		return "", nil, fmt.Errorf("%s: no FROM", path)
	}
	fields := strings.Fields(all[last].args)
	if len(fields) == 0 {
		return "", nil, fmt.Errorf("%s:%d: FROM names no image", path, all[last].line)
	}
	return fields[0], all[last+1:], nil
}

// copySpec is a COPY of the final stage: from an earlier stage (from
// set) or the build context.
type copySpec struct {
	line int
	from string
	srcs []string
	dest string
}

// stageConfig is what the final stage sets: files copied in, and the
// image config's fields.
type stageConfig struct {
	copies     []copySpec
	env        []string // KEY=value, in order, later ones replacing
	user       string
	workdir    string
	ports      []string // "8080/tcp"
	entrypoint []string
	cmd        []string
	labels     map[string]string
}

// interpret reads the final stage's instructions. It knows the ones a
// stage FROM a distroless image can use and refuses the rest (RUN needs a
// shell, which neither that image nor this build has), so the Dockerfile
// cannot drift from this build unnoticed.
func interpret(path string, stage []instruction) (*stageConfig, error) {
	sc := &stageConfig{labels: map[string]string{}}
	for _, in := range stage {
		where := fmt.Sprintf("%s:%d: %s", path, in.line, in.cmd)
		switch in.cmd {
		case "COPY":
			c := copySpec{line: in.line}
			f := strings.Fields(in.args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				k, v, _ := strings.Cut(strings.TrimPrefix(f[0], "--"), "=")
				if k != "from" || v == "" {
					return nil, fmt.Errorf("%s: flag %s is not supported by the daemonless build", where, f[0])
				}
				c.from = v
				f = f[1:]
			}
			if strings.HasPrefix(in.args, "[") || len(f) < 2 {
				return nil, fmt.Errorf("%s: want COPY [--from=STAGE] SRC... DEST", where)
			}
			c.srcs, c.dest = f[:len(f)-1], f[len(f)-1]
			for _, s := range c.srcs {
				if strings.ContainsAny(s, "*?[") {
					return nil, fmt.Errorf("%s: wildcard %q is not supported by the daemonless build", where, s)
				}
			}
			if len(c.srcs) > 1 && !strings.HasSuffix(c.dest, "/") {
				return nil, fmt.Errorf("%s: several sources need a destination ending in /", where)
			}
			sc.copies = append(sc.copies, c)
		case "ENV":
			kvs, err := envPairs(in.args)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			for _, kv := range kvs {
				sc.env = setEnv(sc.env, kv)
			}
		case "LABEL":
			kvs, err := envPairs(in.args)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			for _, kv := range kvs {
				k, v, _ := strings.Cut(kv, "=")
				sc.labels[k] = v
			}
		case "USER":
			sc.user = in.args
		case "WORKDIR":
			sc.workdir = in.args
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				sc.ports = append(sc.ports, p)
			}
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
				return nil, fmt.Errorf("%s: want the JSON form (the image has no shell for the shell form): %v", where, err)
			}
			if in.cmd == "ENTRYPOINT" {
				sc.entrypoint = argv
				sc.cmd = nil // as Docker: a new ENTRYPOINT drops an inherited CMD
			} else {
				sc.cmd = argv
			}
		default:
			return nil, fmt.Errorf("%s: not supported by the daemonless build (deploy/image)", where)
		}
	}
	return sc, nil
}

// envPairs splits ENV or LABEL arguments into KEY=value pairs: the
// KEY=value form, values optionally double-quoted, or the old "KEY value"
// form.
func envPairs(args string) ([]string, error) {
	if k, v, ok := strings.Cut(args, " "); ok && !strings.Contains(k, "=") {
		return []string{k + "=" + strings.TrimSpace(v)}, nil
	}
	var out []string
	for rest := strings.TrimSpace(args); rest != ""; rest = strings.TrimSpace(rest) {
		k, v, ok := strings.Cut(rest, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("want KEY=value, got %q", rest)
		}
		if strings.HasPrefix(v, `"`) {
			end := strings.Index(v[1:], `"`)
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", rest)
			}
			out = append(out, k+"="+v[1:1+end])
			rest = v[2+end:]
			continue
		}
		val, after, _ := strings.Cut(v, " ")
		out = append(out, k+"="+val)
		rest = after
	}
	return out, nil
}

// setEnv sets kv (KEY=value) in env, replacing KEY's earlier value.
func setEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	for i, e := range env {
		if strings.HasPrefix(e, k+"=") {
			env[i] = kv
			return env
		}
	}
	return append(env, kv)
}
