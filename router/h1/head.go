package h1

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/triagegw/triage/router/internal/wire"
)

type headStatus int

const (
	headIncomplete headStatus = iota
	headPlain                 // parsed: the fast path serves it
	headNotPlain              // net/http serves it, from this request on
	headBroken                // the connection failed or timed out mid-head
)

// head is a parsed plain request head. Its strings point into one copy of
// the head's bytes.
type head struct {
	method, target, path, query, host string
	header                            http.Header
	length                            int64 // Content-Length; 0 when absent
	close                             bool  // Connection: close
	chunked                           bool  // Transfer-Encoding: chunked (no Content-Length)
	expect                            bool  // Expect: 100-continue
	// fieldBytes and fields are the header lines' bytes (CRLFs included)
	// and number, as they came: HeadSize.
	fieldBytes, fields int
	// keys and vals are the header's lines in the order they came, with
	// a blank key for Host and Transfer-Encoding (not in header):
	// HeaderLines.
	keys, vals []string
}

// parseHead parses the request head at the start of buf. It reports
// headIncomplete when buf holds no complete head yet, and headNotPlain for
// anything outside the fast path: then net/http parses it, and answers it
// or rejects it as it always has.
//
// It reads top-down: find the head's end (headEnd), read the request line
// (requestLine), then the header lines (fieldLines), then check what only the
// whole head shows.
func parseHead(buf []byte) (head, int, headStatus) {
	var h head
	var lf lineEnds
	end, lines, st := headEnd(buf, &lf)
	if st != headPlain {
		return h, 0, st
	}
	s := string(buf[:end+2])

	// headEnd checked that every LF ends a CRLF: a line ends one byte
	// before its LF.
	i := int(lf[0]) - 1
	rest := s[i+2:]
	h.fieldBytes, h.fields = len(rest), lines
	if !h.requestLine(s[:i]) {
		return h, 0, headNotPlain
	}
	var c fieldCounts
	if !h.fieldLines(rest, lines, &lf, &c) {
		return h, 0, headNotPlain
	}
	if c.hosts == 0 {
		return h, 0, headNotPlain // net/http answers 400
	}
	if h.chunked && c.lengths > 0 {
		return h, 0, headNotPlain // both framings: net/http's rules, not a guess
	}
	return h, end + 4, headPlain
}

// requestLine reads "METHOD target HTTP/1.1" into h, and reports false for
// anything but POST or GET of a plain target over HTTP/1.1.
func (h *head) requestLine(line string) bool {
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return false
	}
	sp2 := strings.IndexByte(line[sp1+1:], ' ')
	if sp2 < 0 {
		return false
	}
	sp2 += sp1 + 1
	switch line[:sp1] {
	case "POST":
		h.method = http.MethodPost
	case "GET":
		h.method = http.MethodGet
	default:
		return false
	}
	if line[sp2+1:] != "HTTP/1.1" {
		return false
	}
	h.target = line[sp1+1 : sp2]
	if !plainTarget(h.target) {
		return false
	}
	h.path = h.target
	if q := strings.IndexByte(h.target, '?'); q >= 0 {
		h.path, h.query = h.target[:q], h.target[q+1:]
	}
	return true
}

// fieldCounts counts the header lines that may come only once.
type fieldCounts struct {
	hosts, lengths, tes int
}

// fieldLines reads the header lines of rest (lines of them, each ending
// in CRLF; lf holds their ends after the request line's) into h.header,
// h.keys and h.vals, and reports false for a line outside the fast path.
// The fields the fast path acts on are read in the loop, not in a function
// of their own: a call per header line was 2.8% more instructions per head
// (BenchmarkParseHead, bench/icount.sh).
func (h *head) fieldLines(rest string, lines int, lf *lineEnds, c *fieldCounts) bool {
	vals, keys := h.makeHeader(lines)
	entries := 0
	for k := 0; len(rest) > 0; k++ {
		var e int // the line's end, as headEnd found it (past the lines it kept, found again)
		if k+1 < len(lf) {
			e = int(lf[k+1]-lf[k]) - 2
		} else {
			e = strings.IndexByte(rest, '\n') - 1
		}
		line := rest[:e]
		rest = rest[e+2:]
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		key, ok := wire.FieldName(line[:colon])
		if !ok {
			return false
		}
		v := wire.TrimOWS(line[colon+1:])
		if !wire.FieldValue(v) {
			return false
		}
		switch key {
		case "Host":
			c.hosts++
			if c.hosts > 1 || !plainHost(v) {
				return false
			}
			h.host = v
			continue // as in net/http, Host moves to Request.Host
		case "Content-Length":
			c.lengths++
			n, ok := wire.ParseLength(v)
			if c.lengths > 1 || !ok {
				return false
			}
			h.length = n
		case "Transfer-Encoding":
			// Exactly "chunked", once, as net/http accepts it; it
			// moves to Request.TransferEncoding, as there.
			c.tes++
			if c.tes > 1 || !strings.EqualFold(v, "chunked") {
				return false
			}
			h.chunked = true
			continue
		case "Expect":
			// 100-continue is answered when the body is first read;
			// net/http answers any other expectation with 417.
			if h.expect || !strings.EqualFold(v, "100-continue") {
				return false
			}
			h.expect = true
		case "Upgrade":
			return false
		case "Connection":
			if wire.HasToken(v, "upgrade") {
				return false
			}
			h.close = h.close || wire.HasToken(v, "close")
		}
		// Each line its own entry, without looking first: a name that
		// repeats shows as fewer entries than lines, below.
		vals[k], keys[k] = v, key
		h.header[key] = vals[k : k+1 : k+1]
		entries++
	}
	if len(h.header) != entries {
		h.mergeRepeats(keys, vals)
	}
	h.keys, h.vals = keys, vals
	return true
}

// makeHeader makes h.header for lines lines, and one slab that holds their
// values, which the map's entries are slices of, and their keys in order
// ("" for a line that is not in the map), for HeaderLines.
func (h *head) makeHeader(lines int) (vals, keys []string) {
	slab := make([]string, 2*lines)
	h.header = make(http.Header, lines)
	return slab[:lines:lines], slab[lines:]
}

// mergeRepeats rebuilds h.header when a name came more than once: its
// entry holds all its values, in order, as net/http's does.
func (h *head) mergeRepeats(keys, vals []string) {
	clear(h.header)
	for k, key := range keys {
		if key == "" {
			continue
		}
		if old, ok := h.header[key]; ok {
			h.header[key] = append(old, vals[k])
		} else {
			h.header[key] = vals[k : k+1 : k+1]
		}
	}
}

// lineEnds holds where a head's first lines end: the index of each LF,
// the request line's first.
type lineEnds [64]int32

// headEnd finds the empty line that ends the head at the start of buf, in
// one pass over its line ends: end is the index of its "\r\n\r\n",
// lines the header lines before it (the request line excluded), and lf
// the first line ends. A line ending without CR, which net/http accepts,
// is left to net/http (headNotPlain); no end yet is headIncomplete.
func headEnd(buf []byte, lf *lineEnds) (end, lines int, st headStatus) {
	prev := -1 // the last '\n'
	for i := bytes.IndexByte(buf, '\n'); i >= 0; {
		if i == 0 || buf[i-1] != '\r' {
			return 0, 0, headNotPlain
		}
		if prev >= 0 && i-prev == 2 {
			return prev - 1, lines - 1, headPlain
		}
		if lines < len(lf) {
			lf[lines] = int32(i)
		}
		lines++
		prev = i
		j := bytes.IndexByte(buf[i+1:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return 0, 0, headIncomplete
}

// plainTarget accepts an origin-form target of visible ASCII without a
// fragment and without escapes in the path, so that the path needs no
// decoding (the query is kept raw, as in net/http).
func plainTarget(t string) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	inQuery := false
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c <= ' ' || c >= 0x7f || c == '#' || c == '%' && !inQuery {
			return false
		}
		inQuery = inQuery || c == '?'
	}
	return true
}

func plainHost(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_') {
			return false
		}
	}
	return true
}
