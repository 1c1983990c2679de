// Command image assembles the gateway's container image as an OCI image
// layout (oci-layout, index.json, blobs/sha256), without a container
// daemon or a registry. scripts/build-image.sh builds the binary and
// fetches the packages, then runs it; see that script for use.
//
// The image is what the repository's Dockerfile builds, in two layers:
//
//   - the base, standing in for the Dockerfile's FROM
//     (gcr.io/distroless/cc-debian12:nonroot): glibc, libgcc_s and
//     libstdc++ from the Debian packages given with -deb, the CA bundle
//     made from ca-certificates, os-release, /etc/passwd and /etc/group
//     with nonroot (65532), /tmp, and the base's PATH, SSL_CERT_FILE and
//     working directory;
//   - the final stage of the Dockerfile, read from the Dockerfile itself:
//     its COPY instructions (--from a build stage given with -stage),
//     ENV, USER, EXPOSE, ENTRYPOINT and CMD. An instruction this command
//     does not know fails the build, so the Dockerfile and this build
//     cannot drift apart unnoticed.
//
// The same inputs give the same bytes, so the same digests: entries in
// path order, every mtime SOURCE_DATE_EPOCH (-epoch), files owned by root
// (nonroot's home by nonroot), file modes 0644 or 0755 by the execute bit,
// gzip without a name or time, JSON with a fixed field order.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// OCI media types (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type imageConfig struct {
	Created      string        `json:"created"`
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Config       runConfig     `json:"config"`
	RootFS       rootFS        `json:"rootfs"`
	History      []historyItem `json:"history"`
}

type runConfig struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyItem struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
	Comment   string `json:"comment,omitempty"`
}

// stageFiles is -stage: files of the Dockerfile's earlier stages, by
// their path there.
type stageFiles map[string]string

func (s stageFiles) String() string { return "" }
func (s stageFiles) Set(v string) error {
	k, f, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(k, "/") || f == "" {
		return errors.New("want /PATH/IN/STAGE=FILE")
	}
	s[k] = f
	return nil
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type options struct {
	out        string
	context    string
	dockerfile string
	stage      stageFiles
	debs       []string
	epoch      time.Time
	name, tag  string
	version    string
}

func main() {
	o := options{stage: stageFiles{}}
	var debs list
	var epoch string
	flag.StringVar(&o.out, "out", "var/image", "the OCI image layout to write (replaced if it is one)")
	flag.StringVar(&o.context, "context", ".", "the Dockerfile's build context: COPY sources are found here")
	flag.StringVar(&o.dockerfile, "dockerfile", "", "the Dockerfile whose final stage is the image (default: Dockerfile in -context)")
	flag.Var(o.stage, "stage", "/PATH=FILE: FILE is what the final stage copies --from an earlier stage's /PATH (repeatable)")
	flag.Var(&debs, "deb", "a Debian package of the base layer (repeatable)")
	flag.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970: every file's mtime and the image's creation time (default $SOURCE_DATE_EPOCH)")
	flag.StringVar(&o.name, "name", "triage", "the image's name, for index.json's io.containerd.image.name")
	flag.StringVar(&o.tag, "tag", "latest", "the image's tag (index.json's org.opencontainers.image.ref.name)")
	flag.StringVar(&o.version, "version", "", "org.opencontainers.image.version (the binary's version)")
	flag.Parse()
	o.debs = debs
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		fail(fmt.Errorf("-epoch (or SOURCE_DATE_EPOCH) %q: want seconds since 1970", epoch))
	}
	o.epoch = time.Unix(sec, 0).UTC()
	if o.dockerfile == "" {
		o.dockerfile = filepath.Join(o.context, "Dockerfile")
	}
	res, err := build(o)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s:%s %s\n", o.name, o.tag, res.manifest)
	fmt.Printf("  layers %d bytes compressed, %d bytes uncompressed, in %s\n", res.compressed, res.uncompressed, o.out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}

// result is what build wrote.
type result struct {
	manifest     string // the manifest's digest: the image's
	compressed   int64  // the layer blobs' bytes
	uncompressed int64  // the layers' tar bytes
}

func build(o options) (result, error) {
	from, stage, err := finalStage(o.dockerfile)
	if err != nil {
		return result{}, err
	}
	if from != base {
		return result{}, fmt.Errorf("%s: the final stage is FROM %s, but the base layer stands in for %s: update deploy/image to the new base", o.dockerfile, from, base)
	}
	sc, err := interpret(o.dockerfile, stage)
	if err != nil {
		return result{}, err
	}
	if len(o.debs) == 0 {
		return result{}, errors.New("no -deb packages: the base layer is made of them (scripts/fetch-image-base.sh fetches them)")
	}
	var debs []*deb
	for _, f := range o.debs {
		d, err := readDeb(f)
		if err != nil {
			return result{}, err
		}
		debs = append(debs, d)
	}
	// By name, whatever order they were given in.
	sort.Slice(debs, func(i, j int) bool { return debs[i].name < debs[j].name })
	arch := runtime.GOARCH
	baseLayer, err := baseTree(debs, arch)
	if err != nil {
		return result{}, err
	}
	app, err := appTree(o, sc)
	if err != nil {
		return result{}, err
	}
	user, err := numericUser(sc.user)
	if err != nil {
		return result{}, fmt.Errorf("%s: USER %s: %v", o.dockerfile, sc.user, err)
	}

	// Written beside the destination, then renamed over it: a failed
	// build leaves the last image as it was.
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(o.out)), 0o755); err != nil {
		return result{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(o.out)), ".image-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	blobs := filepath.Join(tmp, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return result{}, err
	}

	created := o.epoch.Format(time.RFC3339)
	cfg := imageConfig{
		Created:      created,
		Architecture: arch,
		OS:           "linux",
		Config: runConfig{
			User:       user,
			Env:        append([]string(nil), baseEnv...),
			Entrypoint: sc.entrypoint,
			Cmd:        sc.cmd,
			WorkingDir: baseWorkdir,
		},
		RootFS: rootFS{Type: "layers"},
	}
	for _, kv := range sc.env {
		cfg.Config.Env = setEnv(cfg.Config.Env, kv)
	}
	if sc.workdir != "" {
		cfg.Config.WorkingDir = sc.workdir
	}
	if len(sc.ports) > 0 {
		cfg.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range sc.ports {
			cfg.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if len(sc.labels) > 0 {
		cfg.Config.Labels = sc.labels
	}

	var pkgs []string
	for _, d := range debs {
		pkgs = append(pkgs, d.name+"="+d.version)
	}
	m := manifest{SchemaVersion: 2, MediaType: mediaManifest}
	var res result
	for _, l := range []struct {
		t  tree
		by string
	}{
		{baseLayer, "deploy/image: the base of " + base + " from Debian packages " + strings.Join(pkgs, " ")},
		{app, "deploy/image: the final stage of " + filepath.Base(o.dockerfile) + " (" + strings.Join(copyLines(sc), "; ") + ")"},
	} {
		w, err := l.t.write(blobs, o.epoch)
		if err != nil {
			return result{}, err
		}
		m.Layers = append(m.Layers, descriptor{MediaType: mediaLayer, Digest: w.digest, Size: w.size})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, w.diffID)
		cfg.History = append(cfg.History, historyItem{Created: created, CreatedBy: l.by})
		res.compressed += w.size
		res.uncompressed += w.tar
	}
	if m.Config, err = writeJSON(blobs, mediaConfig, cfg); err != nil {
		return result{}, err
	}
	m.Annotations = map[string]string{"org.opencontainers.image.created": created}
	if o.version != "" {
		m.Annotations["org.opencontainers.image.version"] = o.version
	}
	md, err := writeJSON(blobs, mediaManifest, m)
	if err != nil {
		return result{}, err
	}
	md.Platform = &platform{Architecture: arch, OS: "linux"}
	md.Annotations = map[string]string{
		"org.opencontainers.image.ref.name": o.tag,
		"io.containerd.image.name":          "docker.io/library/" + o.name + ":" + o.tag,
	}
	if strings.Contains(o.name, "/") {
		md.Annotations["io.containerd.image.name"] = o.name + ":" + o.tag
	}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{md}})
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "index.json"), idx, 0o644); err != nil {
		return result{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return result{}, err
	}
	if err := replace(tmp, o.out); err != nil {
		return result{}, err
	}
	res.manifest = md.Digest
	return res, nil
}

// appTree is the final stage's layer: its COPY instructions.
func appTree(o options, sc *stageConfig) (tree, error) {
	t := tree{}
	for _, c := range sc.copies {
		for _, src := range c.srcs {
			var file string
			if c.from != "" {
				f, ok := o.stage[src]
				if !ok {
					return nil, fmt.Errorf("%s:%d: COPY --from=%s %s: give the file with -stage %s=FILE", o.dockerfile, c.line, c.from, src, src)
				}
				file = f
			} else {
				rel := filepath.Clean(filepath.FromSlash(src))
				if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
					return nil, fmt.Errorf("%s:%d: COPY %s: outside the build context", o.dockerfile, c.line, src)
				}
				file = filepath.Join(o.context, rel)
			}
			if err := t.copyIn(file, c.dest); err != nil {
				return nil, fmt.Errorf("%s:%d: COPY %s %s: %v", o.dockerfile, c.line, src, c.dest, err)
			}
		}
	}
	return t, nil
}

func copyLines(sc *stageConfig) []string {
	var out []string
	for _, c := range sc.copies {
		s := "COPY "
		if c.from != "" {
			s += "--from=" + c.from + " "
		}
		out = append(out, s+strings.Join(c.srcs, " ")+" "+c.dest)
	}
	return out
}

// numericUser resolves USER's names with the base's /etc/passwd and
// /etc/group, so that the config says 65532:65532: a runtime can then
// tell the user is not root without reading the image's files (the
// kubelet's runAsNonRoot check needs a number).
func numericUser(u string) (string, error) {
	if u == "" {
		return "", errors.New("no USER: the image would run as root")
	}
	name, grp, hasGroup := strings.Cut(u, ":")
	lookup := func(table, name string) (string, error) {
		if _, err := strconv.Atoi(name); err == nil {
			return name, nil
		}
		for _, line := range strings.Split(table, "\n") {
			f := strings.Split(line, ":")
			if len(f) >= 3 && f[0] == name {
				return f[2], nil
			}
		}
		return "", fmt.Errorf("%q is not in the base's users or groups", name)
	}
	uidStr, err := lookup(passwd, name)
	if err != nil {
		return "", err
	}
	if uidStr == "0" {
		return "", errors.New("the image would run as root")
	}
	if !hasGroup {
		return uidStr, nil
	}
	gid, err := lookup(group, grp)
	if err != nil {
		return "", err
	}
	return uidStr + ":" + gid, nil
}

// writeJSON writes v as a blob and returns its descriptor.
func writeJSON(blobs, mediaType string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, err
	}
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(blobs, hexSum), b, 0o644); err != nil {
		return descriptor{}, err
	}
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hexSum, Size: int64(len(b))}, nil
}

// replace puts the layout written at tmp at out, removing what was there
// only if it is an image layout (or nothing).
func replace(tmp, out string) error {
	if _, err := os.Stat(out); err == nil {
		entries, _ := os.ReadDir(out)
		if _, err := os.Stat(filepath.Join(out, "oci-layout")); err != nil && len(entries) > 0 {
			return fmt.Errorf("%s exists and is not an OCI image layout (no oci-layout file): not replacing it", out)
		}
		if err := os.RemoveAll(out); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
