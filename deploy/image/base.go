package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"sort"
	"strings"
)

// The base layer: what distroless/cc-debian12:nonroot holds that the
// gateway needs, from the same Debian packages.
const (
	uid     = 65532 // distroless's nonroot
	caFile  = "etc/ssl/certs/ca-certificates.crt"
	caFrom  = "usr/share/ca-certificates/mozilla/"
	homeDir = "home/nonroot"
)

// baseEnv and baseWorkdir are the base image's config, which the final
// stage's ENV and WORKDIR add to.
var (
	baseEnv = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=/" + caFile,
	}
	baseWorkdir = "/" + homeDir
)

// The users and groups, as distroless's: root, nobody, nonroot.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
	// Files, then DNS, for host names (Go's resolver and glibc's read it).
	nsswitch = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"
)

// keep reports whether a package's file (path without leading "./") goes
// into the base layer: the shared libraries and the loader (but glibc's
// iconv modules, which nothing here uses), the loader's config, the
// system's identity (os-release), and each package's copyright. The
// package's documentation, manuals, and maintainer tools stay out.
func keep(p string) bool {
	switch {
	case strings.HasPrefix(p, "lib/"), strings.HasPrefix(p, "lib64/"):
		return true
	case strings.HasPrefix(p, "usr/lib/"):
		return !strings.Contains(p, "/gconv/")
	case strings.HasPrefix(p, "etc/ld.so.conf.d/"), p == "etc/os-release", p == "etc/debian_version":
		return true
	case strings.HasPrefix(p, "usr/share/doc/"):
		// usr/share/doc/PKG/copyright, or usr/share/doc/PKG as a symlink
		// to another package's directory (libstdc++6 -> gcc-12-base).
		rest := strings.TrimPrefix(p, "usr/share/doc/")
		return !strings.Contains(rest, "/") || strings.Count(rest, "/") == 1 && strings.HasSuffix(rest, "/copyright")
	}
	return false
}

// deb is a Debian package's control data, as dpkg-deb prints it.
type deb struct {
	file    string
	name    string
	version string
	arch    string
	control []byte
}

func readDeb(file string) (*deb, error) {
	out, err := run("dpkg-deb", "--field", file)
	if err != nil {
		return nil, err
	}
	d := &deb{file: file, control: out}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			d.name = v
		case "Version":
			d.version = v
		case "Architecture":
			d.arch = v
		}
	}
	if d.name == "" || d.version == "" {
		return nil, fmt.Errorf("%s: no Package or Version in its control file", file)
	}
	return d, nil
}

func run(name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// baseTree is the base layer: the kept files of debs, the CA bundle made
// from ca-certificates' files, /etc/passwd, /etc/group and
// /etc/nsswitch.conf, /tmp, nonroot's home, and a dpkg status entry per
// package (var/lib/dpkg/status.d, as distroless writes them, so that
// scanners know what is installed).
func baseTree(debs []*deb, arch string) (tree, error) {
	t := tree{}
	var certs []string
	pem := map[string][]byte{}
	for _, d := range debs {
		if d.arch != arch && d.arch != "all" {
			return nil, fmt.Errorf("%s: package for %s, the image is %s", d.file, d.arch, arch)
		}
		if err := unpackDeb(d, t, func(p string, b []byte) {
			certs = append(certs, p)
			pem[p] = b
		}); err != nil {
			return nil, err
		}
		if err := t.bytes("var/lib/dpkg/status.d/"+d.name, 0o644, d.control); err != nil {
			return nil, err
		}
	}
	if len(certs) == 0 {
		return nil, errors.New("no CA certificates: the ca-certificates package is missing")
	}
	// As update-ca-certificates concatenates them: in the order of the
	// names (its ca-certificates.conf lists them sorted).
	sort.Strings(certs)
	var bundle bytes.Buffer
	for _, c := range certs {
		b := pem[c]
		bundle.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			bundle.WriteByte('\n')
		}
	}
	for _, f := range []struct {
		p    string
		mode int64
		b    string
	}{
		{caFile, 0o644, bundle.String()},
		{"etc/passwd", 0o644, passwd},
		{"etc/group", 0o644, group},
		{"etc/nsswitch.conf", 0o644, nsswitch},
	} {
		if err := t.bytes(f.p, f.mode, []byte(f.b)); err != nil {
			return nil, err
		}
	}
	for _, d := range []struct {
		p        string
		mode     int64
		uid, gid int
	}{
		{"tmp", 0o1777, 0, 0},
		{"root", 0o700, 0, 0},
		{homeDir, 0o700, uid, uid},
	} {
		if err := t.dir(d.p, d.mode, d.uid, d.gid); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// unpackDeb adds the kept files of d's data to t, and hands the CA
// certificates to cert.
func unpackDeb(d *deb, t tree, cert func(p string, b []byte)) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", d.file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %v", err)
	}
	rerr := readDebData(d, tar.NewReader(out), t, cert)
	if rerr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %v: %s", d.file, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return rerr
}

func readDebData(d *deb, tr *tar.Reader, t tree, cert func(p string, b []byte)) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %v", d.file, err)
		}
		p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if p == "" {
			continue
		}
		if h.Typeflag == tar.TypeReg && strings.HasPrefix(p, caFrom) && strings.HasSuffix(p, ".crt") {
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("%s: %s: %v", d.file, p, err)
			}
			cert(p, b)
			continue
		}
		if h.Typeflag == tar.TypeDir || !keep(p) {
			continue // directories are made for what they hold
		}
		var n *node
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("%s: %s: %v", d.file, p, err)
			}
			n = &node{typ: tar.TypeReg, mode: h.Mode & 0o7777, data: b, size: int64(len(b))}
		case tar.TypeSymlink:
			n = &node{typ: tar.TypeSymlink, mode: 0o777, link: h.Linkname}
		default:
			return fmt.Errorf("%s: %s: entry type %q is not supported", d.file, p, h.Typeflag)
		}
		if err := t.add(p, n); err != nil {
			return fmt.Errorf("%s: %v", d.file, err)
		}
	}
}
