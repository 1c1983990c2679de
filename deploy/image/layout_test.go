//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// The image as spec'd by the OCI image spec, decoded here apart from the
// assembler's own types, so that a field the assembler misnames fails.
type (
	ociDescriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    map[string]string `json:"platform"`
		Annotations map[string]string `json:"annotations"`
	}
	ociIndex struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     string          `json:"mediaType"`
		Manifests     []ociDescriptor `json:"manifests"`
	}
	ociManifest struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Config        ociDescriptor     `json:"config"`
		Layers        []ociDescriptor   `json:"layers"`
		Annotations   map[string]string `json:"annotations"`
	}
	ociConfig struct {
		Created      string `json:"created"`
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			User         string                     `json:"User"`
			ExposedPorts map[string]json.RawMessage `json:"ExposedPorts"`
			Env          []string                   `json:"Env"`
			Entrypoint   []string                   `json:"Entrypoint"`
			Cmd          []string                   `json:"Cmd"`
			WorkingDir   string                     `json:"WorkingDir"`
			Labels       map[string]string          `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []struct {
			Created    string `json:"created"`
			CreatedBy  string `json:"created_by"`
			EmptyLayer bool   `json:"empty_layer"`
		} `json:"history"`
	}
)

// readBlob reads the blob d names, checking its size and digest, and
// marks it used.
func readBlob(t *testing.T, dir string, d ociDescriptor, used map[string]bool) []byte {
	t.Helper()
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexSum) != 64 {
		t.Fatalf("digest %q: want sha256:<64 hex digits>", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexSum))
	if err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes, the descriptor says %d", d.Digest, len(b), d.Size)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexSum {
		t.Fatalf("blob %s: its content's sha256 is %x", d.Digest, sum)
	}
	used[hexSum] = true
	return b
}

func decodeStrict(t *testing.T, what string, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
}

// checkLayout checks dir against the OCI image layout and image specs:
// oci-layout, index.json, every blob's size and digest, media types,
// diff_ids, and the layers' entries.
func checkLayout(t *testing.T, dir string) *image {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		t.Fatal(err)
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	decodeStrict(t, "oci-layout", b, &layout)
	if layout.Version != "1.0.0" {
		t.Errorf("oci-layout imageLayoutVersion %q, want 1.0.0", layout.Version)
	}
	b, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx ociIndex
	decodeStrict(t, "index.json", b, &idx)
	if idx.SchemaVersion != 2 || idx.MediaType != "application/vnd.oci.image.index.v1+json" || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: schemaVersion %d, mediaType %q, %d manifests; want 2, the OCI index, 1", idx.SchemaVersion, idx.MediaType, len(idx.Manifests))
	}
	md := idx.Manifests[0]
	if md.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("index.json's manifest has mediaType %q", md.MediaType)
	}
	if want := map[string]string{"architecture": runtime.GOARCH, "os": "linux"}; !mapsEqual(md.Platform, want) {
		t.Errorf("index.json's platform %v, want %v", md.Platform, want)
	}
	if got := md.Annotations["org.opencontainers.image.ref.name"]; got != "latest" {
		t.Errorf("ref.name %q, want latest (oci:DIR:latest)", got)
	}
	if got := md.Annotations["io.containerd.image.name"]; got != "docker.io/library/triage:latest" {
		t.Errorf("io.containerd.image.name %q, want docker.io/library/triage:latest", got)
	}

	used := map[string]bool{}
	img := &image{dir: dir, manifest: md.Digest}
	var man ociManifest
	mb := readBlob(t, dir, md, used)
	decodeStrict(t, "manifest", mb, &man)
	if man.SchemaVersion != 2 || man.MediaType != md.MediaType {
		t.Errorf("manifest: schemaVersion %d, mediaType %q", man.SchemaVersion, man.MediaType)
	}
	if man.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Errorf("config mediaType %q", man.Config.MediaType)
	}
	if got := man.Annotations["org.opencontainers.image.version"]; got != testVersion {
		t.Errorf("manifest annotation org.opencontainers.image.version %q, want %q", got, testVersion)
	}
	cb := readBlob(t, dir, man.Config, used)
	decodeStrict(t, "config", cb, &img.config)
	img.compressed = md.Size + man.Config.Size
	if len(man.Layers) == 0 || len(man.Layers) != len(img.config.RootFS.DiffIDs) {
		t.Fatalf("%d layers, %d diff_ids", len(man.Layers), len(img.config.RootFS.DiffIDs))
	}
	if img.config.RootFS.Type != "layers" {
		t.Errorf("rootfs.type %q, want layers", img.config.RootFS.Type)
	}
	nonEmpty := 0
	for _, h := range img.config.History {
		if !h.EmptyLayer {
			nonEmpty++
		}
	}
	if nonEmpty != len(man.Layers) {
		t.Errorf("%d history entries with a layer, %d layers", nonEmpty, len(man.Layers))
	}
	epoch := time.Unix(testEpoch, 0).UTC()
	for i, l := range man.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("layer %d: mediaType %q", i, l.MediaType)
		}
		lb := readBlob(t, dir, l, used)
		img.compressed += l.Size
		img.layerBytes += l.Size
		zr, err := gzip.NewReader(bytes.NewReader(lb))
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("layer %d: gunzip: %v", i, err)
		}
		if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != img.config.RootFS.DiffIDs[i] {
			t.Errorf("layer %d: the uncompressed tar's sha256 is %x, its diff_id %s", i, sum, img.config.RootFS.DiffIDs[i])
		}
		img.uncompressed += int64(len(raw))
		img.files += checkTar(t, i, raw, epoch)
		img.layers = append(img.layers, filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(l.Digest, "sha256:")))
	}
	entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !used[e.Name()] {
			t.Errorf("blobs/sha256/%s: referenced by nothing", e.Name())
		}
	}
	return img
}

// checkTar checks a layer's entries: relative clean paths in sorted order,
// each once, no whiteouts, every mtime the epoch, owned by root but for
// nonroot's home. It returns the number of regular files.
func checkTar(t *testing.T, i int, raw []byte, epoch time.Time) int {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || strings.HasPrefix(name, "../") {
			t.Errorf("layer %d: entry %q is not a clean relative path", i, h.Name)
		}
		if strings.HasPrefix(path.Base(name), ".wh.") {
			t.Errorf("layer %d: whiteout %s", i, name)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("layer %d: %s mtime %v, want SOURCE_DATE_EPOCH %v", i, name, h.ModTime, epoch)
		}
		wantOwner := 0
		if name == "home/nonroot" {
			wantOwner = 65532
		}
		if h.Uid != wantOwner || h.Gid != wantOwner || h.Uname != "" || h.Gname != "" {
			t.Errorf("layer %d: %s owned by %d:%d (%q:%q), want %d:%d without names", i, name, h.Uid, h.Gid, h.Uname, h.Gname, wantOwner, wantOwner)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			files++
		case tar.TypeDir, tar.TypeSymlink:
		default:
			t.Errorf("layer %d: %s has type %q", i, name, h.Typeflag)
		}
		names = append(names, name)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("layer %d: entries not in path order", i)
	}
	for j := 1; j < len(names); j++ {
		if names[j] == names[j-1] {
			t.Errorf("layer %d: %s twice", i, names[j])
		}
	}
	return files
}

// unpack applies the image's layers in order into dir, as a runtime's
// snapshotter does: modes, owners and symlinks as the layers say.
func unpack(t *testing.T, img *image, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range img.layers {
		f, err := os.Open(l)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, filepath.FromSlash(path.Clean(h.Name)))
			switch h.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				_ = os.Remove(p)
				w, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(w, tr); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			case tar.TypeSymlink:
				_ = os.Remove(p)
				if err := os.Symlink(h.Linkname, p); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil && os.Geteuid() == 0 {
				t.Fatal(err)
			}
			if h.Typeflag != tar.TypeSymlink {
				// After chown, which clears setuid bits.
				if err := os.Chmod(p, fs.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
					t.Fatal(err)
				}
			}
		}
		f.Close()
	}
}

func modeBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	return out
}
