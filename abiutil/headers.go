package abiutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// Headers is what a generated package was generated from (its
// zheaders.go records it), checked against the headers on disk at the
// first call of any of its wrappers. Go's build cache keys a cgo package
// on the files of its own directory: a header edited in place elsewhere
// leaves the package's compiled object, and the layouts its build guards
// checked, as they were. The generator links every header into the
// package (zhdr_*.h) so that the cache sees them; where a copy lacks
// the links (a module zip, a vendored copy) or the build predates them,
// this check is what stops the package before any verb runs.
type Headers struct {
	// Package names the package in messages (its Go package name).
	Package string
	// Command is the generator command the package records (its
	// //go:generate directive): what regenerates it.
	Command string
	// Here returns the path of the generated file as compiled
	// (runtime.Caller in that file): the package's directory at build
	// time. A path that is not absolute (-trimpath) or a directory that
	// does not exist here (a deployed binary) skips the check.
	Here func() string
	// Files are the headers read, each with the -I directory as the
	// package names it.
	Files []HeaderFile
	// Installed are headers the package's headers defer to when they
	// exist (the project's restatement uses the system's MLNX_OFED
	// headers instead of itself, #include_next); Restated says that the
	// build compiled the restatement while none of them existed (the
	// cgo preamble tells). Such a build predates their installation
	// once one of them exists: its guards never checked them.
	Installed []string
	Restated  bool

	done atomic.Bool
	mu   sync.Mutex
	err  error
}

// HeaderFile is one header a package was generated from.
type HeaderFile struct {
	// Dir is its -I directory as the package names it: relative to the
	// package's directory, or absolute.
	Dir string
	// Path is the header relative to Dir; SHA256 its contents' digest
	// (hex) when the package was generated.
	Path   string
	SHA256 string
	// Records are the records it defines that the package has, each
	// with the digest of its definition (RecordDigests), so that a
	// changed header names what changed.
	Records []RecordDigest
}

// RecordDigest is a record's tag ("struct ibv_exp_task") and the digest
// of its definition's text.
type RecordDigest struct {
	Name, Digest string
}

// Err returns the error every wrapper of the package returns instead of
// calling C: nil when the headers are those the package was generated
// from (or cannot be found here), else a *HeadersError. The headers are
// read once per process, at the first call; after that Err costs one
// atomic load.
func (h *Headers) Err() error {
	if h.done.Load() {
		return h.err
	}
	return h.check()
}

func (h *Headers) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done.Load() {
		h.err = h.compare()
		h.done.Store(true)
	}
	return h.err
}

// maxHeaderBytes bounds what the check reads of one header (as the
// generator bounds what it parses).
const maxHeaderBytes = 64 << 20

func (h *Headers) compare() error {
	if h.Here == nil {
		return nil
	}
	here := h.Here()
	if !filepath.IsAbs(here) {
		return nil // -trimpath: no source tree to compare with
	}
	if _, err := os.Stat(here); err != nil {
		return nil // not built on this machine, or the package moved
	}
	dir := filepath.Dir(here)
	e := &HeadersError{Package: h.Package, Dir: dir, Command: h.Command}
	if h.Restated {
		for _, p := range h.Installed {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				e.Installed = p
				return e
			}
		}
	}
	for _, f := range h.Files {
		if f.Dir == "" {
			continue
		}
		p := filepath.Join(f.Dir, filepath.FromSlash(f.Path))
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		b, err := inputfile.Read(p, maxHeaderBytes, "")
		if err != nil {
			continue // gone, unreadable or not a file: the build would say
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) == f.SHA256 {
			continue
		}
		c := ChangedHeader{File: p}
		now := map[string]string{}
		for _, r := range RecordDigests(b) {
			now[r.Name] = r.Digest
		}
		for _, r := range f.Records {
			if now[r.Name] != r.Digest {
				c.Records = append(c.Records, r.Name)
			}
		}
		e.Changed = append(e.Changed, c)
	}
	if len(e.Changed) == 0 {
		return nil
	}
	return e
}

// HeadersError says that a package was built from other headers than
// the ones it was generated from: they changed in place after it was
// built (Go's build cache did not see it), or headers the package's
// headers defer to were installed since. Every wrapper of the package
// returns it, without calling C. errors.Is(err, syscall.ESTALE) is true.
type HeadersError struct {
	Package string // the package's name
	Dir     string // its directory at build time
	Command string // what regenerates it
	// Changed are the headers that differ from the ones it was
	// generated from.
	Changed []ChangedHeader
	// Installed, if set, is a header the restatement defers to, which
	// exists now but did not when the package was built.
	Installed string
}

// ChangedHeader is a header that changed, and the records it defines
// whose definitions changed (or are gone), in file order.
type ChangedHeader struct {
	File    string
	Records []string
}

func (e *HeadersError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "verbsexp: package %s (%s) was not called: ", e.Package, e.Dir)
	if e.Installed != "" {
		fmt.Fprintf(&b, "it was built on its own restatement of the headers before %s was installed, which its headers now defer to; its build guards never checked that file: rebuild with go build -a so the guards check it", e.Installed)
		return b.String()
	}
	b.WriteString("the headers changed since it was generated and built, and Go's build cache does not see headers outside the package: ")
	for i, c := range e.Changed {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.File)
		switch len(c.Records) {
		case 0:
			b.WriteString(" changed (none of the package's records did: its constants, macros or functions may have)")
		default:
			b.WriteString(" changed (" + strings.Join(c.Records, ", ") + ")")
		}
	}
	fmt.Fprintf(&b, "; regenerate it (go generate in %s runs %s), then rebuild with go build -a", e.Dir, e.Command)
	return b.String()
}

// Unwrap makes errors.Is(err, syscall.ESTALE) true: the compiled package
// is stale against the headers.
func (e *HeadersError) Unwrap() error { return syscall.ESTALE }

// RecordDigests finds the records src defines with a tag (struct NAME {
// … } and union NAME { … }, also inside other records) and returns each
// tag once, in the order of first definition, with the SHA-256 (hex) of
// its definition's tokens: comments and whitespace do not count, string
// and character literals are single tokens, braces inside them are not
// braces. A tag defined more than once (under #if branches) is digested
// over all its definitions. Records it cannot see (an anonymous struct
// behind a typedef, one made by a macro) are not listed.
func RecordDigests(src []byte) []RecordDigest {
	toks := cTokens(src)
	texts := map[string][]string{}
	var order []string
	for i := 0; i < len(toks); i++ {
		if toks[i] != "struct" && toks[i] != "union" {
			continue
		}
		j := skipAttributes(toks, i+1)
		if j+1 >= len(toks) || !isIdent(toks[j]) || toks[j+1] != "{" {
			continue
		}
		end := matchBrace(toks, j+1)
		if end < 0 {
			continue // unbalanced: not a definition this scanner can read
		}
		name := toks[i] + " " + toks[j]
		if _, ok := texts[name]; !ok {
			order = append(order, name)
		}
		texts[name] = append(texts[name], strings.Join(toks[i:end+1], " "))
	}
	r := make([]RecordDigest, 0, len(order))
	for _, n := range order {
		sum := sha256.Sum256([]byte(strings.Join(texts[n], "\n")))
		r = append(r, RecordDigest{Name: n, Digest: hex.EncodeToString(sum[:])})
	}
	return r
}

// skipAttributes skips GNU attributes between struct and its tag
// (struct __attribute__((packed)) tag { … }).
func skipAttributes(toks []string, i int) int {
	for i < len(toks) && (toks[i] == "__attribute__" || toks[i] == "__attribute") {
		if i+1 >= len(toks) || toks[i+1] != "(" {
			return i
		}
		depth := 0
		j := i + 1
		for ; j < len(toks); j++ {
			switch toks[j] {
			case "(":
				depth++
			case ")":
				depth--
			}
			if depth == 0 {
				break
			}
		}
		i = j + 1
	}
	return i
}

// matchBrace returns the index of the } that closes the { at open, or -1.
func matchBrace(toks []string, open int) int {
	depth := 0
	for k := open; k < len(toks); k++ {
		switch toks[k] {
		case "{":
			depth++
		case "}":
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return -1
}

func isIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '_' && c != '$' && !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// cTokens splits C source into tokens as far as RecordDigests needs:
// identifiers and numbers (runs of identifier characters), string and
// character literals (escapes kept), and every other character on its
// own; comments, whitespace and line continuations separate tokens and
// are dropped.
func cTokens(src []byte) []string {
	var toks []string
	word := func(c byte) bool {
		return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '\\' && i+1 < len(src) && (src[i+1] == '\n' || src[i+1] == '\r'):
			i += 2
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := bytes.Index(src[i+2:], []byte("*/"))
			if end < 0 {
				return toks // an unterminated comment ends the file
			}
			i += 2 + end + 2
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				if src[i] == '\\' && i+1 < len(src) && src[i+1] == '\n' {
					i++ // a continued // comment goes on
				}
				i++
			}
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			toks = append(toks, string(src[i:j]))
			i = j
		case word(c):
			j := i
			for j < len(src) && word(src[j]) {
				j++
			}
			toks = append(toks, string(src[i:j]))
			i = j
		default:
			toks = append(toks, string(src[i:i+1]))
			i++
		}
	}
	return toks
}
