package gendocs

import "testing"

func TestSplitDefault(t *testing.T) {
	for _, c := range []struct{ doc, def, rest string }{
		{"Interval between checks. Default 5s.", "`5s`", "Interval between checks."},
		{"The share sampled, above 0 and at most 1. Default 0.01.", "`0.01`", "The share sampled, above 0 and at most 1."},
		{"Bounds the load. Default 1.25. Above 1.", "`1.25`", "Bounds the load. Above 1."},
		{"Asks for usage. Default true; turn it off for a server that refuses it.", "`true`", "Asks for usage. Turn it off for a server that refuses it."},
		{"The JSONL file. Default: none, sampling off.", "none, sampling off", "The JSONL file."},
		{"How a replica is chosen: • \"p2c\" (the default): power of two choices.", "`p2c`", "How a replica is chosen: • \"p2c\" (the default): power of two choices."},
		{"Bounds every call: default 50ms, at most 1s.", "`50ms`", "Bounds every call: default 50ms, at most 1s."},
		{"The pool's name. Required.", "required", "The pool's name."},
		{"Aliases clients may send.", "", "Aliases clients may send."},
	} {
		def, rest := splitDefault(c.doc)
		if def != c.def || rest != c.rest {
			t.Errorf("splitDefault(%q) = %q, %q, want %q, %q", c.doc, def, rest, c.def, c.rest)
		}
	}
}

func TestLeadAndClean(t *testing.T) {
	keys := map[string]string{"Listen": "listen", "MaxCooldown": "max_cooldown", "URL": "url"}
	for _, c := range []struct{ doc, goName, key, want string }{
		{"Listen is the address the gateway serves on.", "Listen", "listen", "The address the gateway serves on."},
		{"Cooldown doubles up to MaxCooldown.", "Cooldown", "cooldown", "`cooldown` doubles up to `max_cooldown`."},
		{"URL is the base URL (ResolveSecrets).", "URL", "url", "The base URL."},
		{"Retry says when (config.Load resolves them). See ModelsPath.", "Retry", "pools[].retry", "`pools[].retry` says when."},
	} {
		if got := clean(lead(c.doc, c.goName, c.key), keys); got != c.want {
			t.Errorf("clean(lead(%q)) = %q, want %q", c.doc, got, c.want)
		}
	}
}

func TestAnchor(t *testing.T) {
	for path, want := range map[string]string{
		"pools[].replicas[]":  "poolsreplicas",
		"access.prices.NAME":  "accesspricesname",
		"triage models pull":  "triage-models-pull",
		"server.debug_listen": "serverdebug_listen",
	} {
		if got := anchor(path); got != want {
			t.Errorf("anchor(%q) = %q, want %q", path, got, want)
		}
	}
}
