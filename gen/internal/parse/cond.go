package parse

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Which conditional groups of the -I headers a preprocessor took decides
// which declarations it saw: an #ifdef __aarch64__ in a header is the
// one way the same headers declare different things on two targets
// (macros expanding differently only change numbers, which the probes
// ask the compilers for). So every header of the -I directories is read
// marked: after each #if, #ifdef, #ifndef, #elif, #elifdef, #elifndef
// and #else line comes a line defining a marker macro named for the
// header and the line, then a #line directive that restores the
// numbering (every position stays the header's own). A group taken
// defines its marker; at the end of the translation the markers defined
// are the groups taken. The C front end reads the marked headers for
// the translated target, each probe's compiler reads marked copies
// (probe.go), and two targets whose preprocessors took the same groups
// read the same declarations from the -I headers.

// condPrefix starts every marker macro (the implementation's namespace:
// no header can mean it).
const condPrefix = "__verbsexp_cond_"

// untracedPrefix starts the entry a translation records instead of the
// markers of a header it could not mark (one with #line directives of
// its own, which the markers' #line would override): no probe takes it,
// so every target is translated on its own.
const untracedPrefix = "untraced: "

// condMarker names the marker of the conditional directive ending on
// line of the header at path (absolute).
func condMarker(path string, line int) string {
	sum := sha256.Sum256([]byte(path))
	return fmt.Sprintf("%s%s_%d", condPrefix, hex.EncodeToString(sum[:8]), line)
}

// markConditionals returns b with a marker after every conditional
// directive, and the markers in order. ok is false, and b returned as
// it is, when the header has #line directives of its own.
func markConditionals(b []byte, path string) (marked []byte, markers []string, ok bool) {
	if !bytes.Contains(b, []byte("if")) && !bytes.Contains(b, []byte("else")) {
		return b, nil, true // no conditional directive (every one spells if or else)
	}
	type insertion struct {
		at   int // byte offset after the directive's last line
		line int // that line
	}
	var ins []insertion
	lx := newLexer(string(b))
	var buf []cToken
	for {
		ll, more := lx.next(buf)
		if !more {
			break
		}
		buf = ll.toks
		if !ll.directive || len(ll.toks) < 2 {
			continue
		}
		if ll.toks[1].kind == tkNumber {
			return b, nil, false // a GNU line marker: # 12 "file"
		}
		switch ll.toks[1].text {
		case "line":
			return b, nil, false
		case "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else":
			// The lexer stands after the newline ending the directive
			// (or at the end of the file).
			end := lx.line - 1
			if lx.i >= len(b) && (len(b) == 0 || b[len(b)-1] != '\n') {
				end = lx.line
			}
			ins = append(ins, insertion{lx.i, end})
		}
	}
	if len(ins) == 0 {
		return b, nil, true
	}
	var out bytes.Buffer
	out.Grow(len(b) + 64*len(ins))
	prev := 0
	for _, in := range ins {
		out.Write(b[prev:in.at])
		if in.at == len(b) && (len(b) == 0 || b[len(b)-1] != '\n') {
			out.WriteByte('\n')
		}
		m := condMarker(path, in.line)
		markers = append(markers, m)
		fmt.Fprintf(&out, "#define %s\n#line %d\n", m, in.line+1)
		prev = in.at
	}
	out.Write(b[prev:])
	return out.Bytes(), markers, true
}

// condsTaken lists, sorted, the markers among names (the macros a
// translation ended with) and the untraced headers' entries.
func condsTaken(names []string, untraced []string) []string {
	var r []string
	for _, n := range names {
		if strings.HasPrefix(n, condPrefix) {
			r = append(r, n)
		}
	}
	for _, p := range untraced {
		r = append(r, untracedPrefix+p)
	}
	sort.Strings(r)
	return r
}
