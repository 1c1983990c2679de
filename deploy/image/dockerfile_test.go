package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeDockerfile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The final stage is read as Docker reads it, and what the daemonless
// build cannot do is refused with the line that asks for it.
func TestInterpretFinalStage(t *testing.T) {
	p := writeDockerfile(t, `# comment
FROM golang:1.26-bookworm AS build
RUN go build -o /out/triage ./cmd/triage

FROM `+base+`
COPY --from=build /out/triage /usr/local/bin/triage
COPY a.yaml \
     b.yaml /etc/triage/
ENV A=1 B="two words"
ENV C 3
USER nonroot:nonroot
EXPOSE 8080 9090/udp
ENTRYPOINT ["/usr/local/bin/triage"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
`)
	from, stage, err := finalStage(p)
	if err != nil {
		t.Fatal(err)
	}
	if from != base {
		t.Errorf("FROM %q, want %q", from, base)
	}
	sc, err := interpret(p, stage)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.copies) != 2 || sc.copies[0].from != "build" || !slices.Equal(sc.copies[1].srcs, []string{"a.yaml", "b.yaml"}) || sc.copies[1].dest != "/etc/triage/" {
		t.Errorf("copies %+v", sc.copies)
	}
	if want := []string{"A=1", "B=two words", "C=3"}; !slices.Equal(sc.env, want) {
		t.Errorf("env %q, want %q", sc.env, want)
	}
	if want := []string{"8080/tcp", "9090/udp"}; !slices.Equal(sc.ports, want) {
		t.Errorf("ports %q, want %q", sc.ports, want)
	}
	if !slices.Equal(sc.entrypoint, []string{"/usr/local/bin/triage"}) || !slices.Equal(sc.cmd, []string{"serve", "--listen", "0.0.0.0:8080"}) {
		t.Errorf("entrypoint %q cmd %q", sc.entrypoint, sc.cmd)
	}
	if u, err := numericUser(sc.user); err != nil || u != "65532:65532" {
		t.Errorf("USER %s = %q, %v; want 65532:65532", sc.user, u, err)
	}

	for _, tc := range []struct{ stage, want string }{
		{"RUN echo hi", ":2: RUN: not supported"},
		{`CMD serve --listen 0.0.0.0:8080`, "want the JSON form"},
		{"COPY --chown=1:1 a /a", "flag --chown=1:1 is not supported"},
		{"COPY *.yaml /etc/", `wildcard "*.yaml"`},
		{"COPY a b /etc", "need a destination ending in /"},
		{"ADD a /a", ":2: ADD: not supported"},
	} {
		p := writeDockerfile(t, "FROM "+base+"\n"+tc.stage+"\n")
		_, stage, err := finalStage(p)
		if err == nil {
			_, err = interpret(p, stage)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.stage, err, tc.want)
		}
	}
}

func TestNumericUser(t *testing.T) {
	for _, tc := range []struct{ user, want, err string }{
		{"nonroot:nonroot", "65532:65532", ""},
		{"nonroot", "65532", ""},
		{"65532:65532", "65532:65532", ""},
		{"nobody:nonroot", "65534:65532", ""},
		{"root", "", "as root"},
		{"0:0", "", "as root"},
		{"", "", "no USER"},
		{"app", "", `"app" is not in the base's users`},
	} {
		got, err := numericUser(tc.user)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("numericUser(%q) = %q, %v; want %q, an error saying %q", tc.user, got, err, tc.want, tc.err)
		}
	}
}

// The base keeps the loader, the libraries and the copyrights of the
// packages, not their documentation, tools or iconv modules.
func TestKeep(t *testing.T) {
	for p, want := range map[string]bool{
		"lib/x86_64-linux-gnu/libc.so.6":                 true,
		"lib64/ld-linux-x86-64.so.2":                     true,
		"usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30":   true,
		"usr/lib/os-release":                             true,
		"etc/os-release":                                 true,
		"etc/ld.so.conf.d/x86_64-linux-gnu.conf":         true,
		"usr/share/doc/libc6/copyright":                  true,
		"usr/share/doc/libstdc++6":                       true, // the symlink to gcc-12-base
		"usr/lib/x86_64-linux-gnu/gconv/UTF-16.so":       false,
		"usr/share/doc/libc6/changelog.Debian.gz":        false,
		"usr/share/gdb/auto-load/usr/lib/libstdc++.py":   false,
		"usr/sbin/update-ca-certificates":                false,
		"usr/share/man/man8/update-ca-certificates.8.gz": false,
		"etc/issue": false,
	} {
		if got := keep(p); got != want {
			t.Errorf("keep(%q) = %v, want %v", p, got, want)
		}
	}
}
