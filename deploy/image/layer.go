package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// node is one entry of a layer: a directory, a regular file (its bytes in
// data, or read from file when the layer is written) or a symlink.
type node struct {
	typ      byte // tar.TypeDir, tar.TypeReg, tar.TypeSymlink
	mode     int64
	uid, gid int
	data     []byte
	file     string
	size     int64
	link     string
}

// tree is a layer's contents by path (slash-separated, no leading slash).
// Parents are made as directories (0755, root) when a child is added.
type tree map[string]*node

func cleanPath(p string) (string, error) {
	c := path.Clean("/" + p)
	if c == "/" {
		return "", fmt.Errorf("path %q names the root", p)
	}
	return c[1:], nil
}

func (t tree) add(p string, n *node) error {
	p, err := cleanPath(p)
	if err != nil {
		return err
	}
	if old, ok := t[p]; ok && !(old.typ == tar.TypeDir && n.typ == tar.TypeDir) {
		return fmt.Errorf("%s: added twice", p)
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if pn, ok := t[d]; ok {
			if pn.typ != tar.TypeDir {
				return fmt.Errorf("%s: its parent %s is not a directory", p, d)
			}
			continue
		}
		t[d] = &node{typ: tar.TypeDir, mode: 0o755}
	}
	t[p] = n
	return nil
}

func (t tree) dir(p string, mode int64, uid, gid int) error {
	return t.add(p, &node{typ: tar.TypeDir, mode: mode, uid: uid, gid: gid})
}

func (t tree) bytes(p string, mode int64, b []byte) error {
	return t.add(p, &node{typ: tar.TypeReg, mode: mode, data: b, size: int64(len(b))})
}

func (t tree) symlink(p, target string) error {
	return t.add(p, &node{typ: tar.TypeSymlink, mode: 0o777, link: target})
}

// file adds the file at src (whose mode is normalized to 0755 or 0644 by
// its owner's execute bit, so that a checkout's umask changes nothing).
func (t tree) file(p, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	mode := int64(0o644)
	if fi.Mode()&0o100 != 0 {
		mode = 0o755
	}
	return t.add(p, &node{typ: tar.TypeReg, mode: mode, file: src, size: fi.Size()})
}

// copyIn adds src under dest as Docker's COPY does: a file to dest (or
// into it when dest ends in /), a directory's contents into dest.
func (t tree) copyIn(src, dest string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if strings.HasSuffix(dest, "/") {
			dest = path.Join(dest, path.Base(src))
		}
		return t.file(dest, src)
	}
	if err := t.dir(dest, 0o755, 0, 0); err != nil {
		return err
	}
	return fsWalk(src, func(rel string, d fs.DirEntry) error {
		p := path.Join(dest, rel)
		switch {
		case d.IsDir():
			return t.dir(p, 0o755, 0, 0)
		case d.Type().IsRegular():
			return t.file(p, src+"/"+rel)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src + "/" + rel)
			if err != nil {
				return err
			}
			return t.symlink(p, target)
		}
		return fmt.Errorf("%s/%s: neither a file, a directory nor a symlink", src, rel)
	})
}

func fsWalk(root string, fn func(rel string, d fs.DirEntry) error) error {
	return fs.WalkDir(os.DirFS(root), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		return fn(p, d)
	})
}

// layer is a written layer blob.
type layer struct {
	digest string // sha256 of the gzip blob
	diffID string // sha256 of the uncompressed tar
	size   int64  // of the blob
	tar    int64  // bytes of the uncompressed tar
}

// write writes t as a gzip-compressed tar into blobs (a layout's
// blobs/sha256), the same bytes for the same tree: entries sorted by path
// (a directory before what it holds), every mtime epoch, owners numeric
// without names.
func (t tree) write(blobs string, epoch time.Time) (layer, error) {
	tmp, err := os.CreateTemp(blobs, ".layer-")
	if err != nil {
		return layer{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	blobHash, diffHash := sha256.New(), sha256.New()
	blob := &counter{w: io.MultiWriter(tmp, blobHash)}
	zw, err := gzip.NewWriterLevel(blob, gzip.BestCompression)
	if err != nil {
		return layer{}, err
	}
	raw := &counter{w: io.MultiWriter(zw, diffHash)}
	tw := tar.NewWriter(raw)

	paths := make([]string, 0, len(t))
	for p := range t {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		n := t[p]
		h := &tar.Header{
			Typeflag: n.typ,
			Name:     p,
			Mode:     n.mode,
			Uid:      n.uid,
			Gid:      n.gid,
			ModTime:  epoch,
		}
		switch n.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = n.link
		case tar.TypeReg:
			h.Size = n.size
		}
		if err := tw.WriteHeader(h); err != nil {
			return layer{}, fmt.Errorf("%s: %v", p, err)
		}
		if n.typ != tar.TypeReg {
			continue
		}
		if n.file == "" {
			if _, err := tw.Write(n.data); err != nil {
				return layer{}, err
			}
			continue
		}
		if err := copyFile(tw, n.file, n.size); err != nil {
			return layer{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return layer{}, err
	}
	if err := zw.Close(); err != nil {
		return layer{}, err
	}
	if err := tmp.Close(); err != nil {
		return layer{}, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return layer{}, err
	}
	l := layer{
		digest: "sha256:" + hex.EncodeToString(blobHash.Sum(nil)),
		diffID: "sha256:" + hex.EncodeToString(diffHash.Sum(nil)),
		size:   blob.n,
		tar:    raw.n,
	}
	return l, os.Rename(tmp.Name(), blobs+"/"+strings.TrimPrefix(l.digest, "sha256:"))
}

// copyFile writes the size bytes of the file at src, failing if it has
// changed size since it was added.
func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size+1))
	if err != nil {
		return fmt.Errorf("%s: %v", src, err)
	}
	if n != size {
		return fmt.Errorf("%s: %d bytes, not the %d it had when the layer was planned (changed while building?)", src, n, size)
	}
	return nil
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
