package parse

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"time"
)

// pragmaOnceRE matches a `#pragma once` line (with trailing white space
// or a comment).
var pragmaOnceRE = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*(?://.*|/\*.*\*/[ \t]*)?\r?$`)

// rewritePragmaOnce turns `#pragma once` into an include guard:
// modernc.org/cc/v4 ignores the pragma, so two headers that include each
// other (or one that includes itself), which gcc reads once each, were
// included forever, allocating without bound.
//
// The whole file is wrapped in `#ifndef G` … `#endif` and each pragma line
// becomes `#define G`, in place: a pragma that an #if excludes, or that
// sits in a comment, does nothing, as in gcc. A `#line 1` after the
// opening line keeps every position as in the file. G is keyed as gcc
// identifies once-only files: by content and modification time (a
// symlink, a hard link or an identical copy is the same file).
func rewritePragmaOnce(b []byte, mtime time.Time) []byte {
	// "pragma" first: "once" is common (pthread_once), and the regexp
	// over a whole header costs more than reading it.
	if !bytes.Contains(b, []byte("pragma")) || !bytes.Contains(b, []byte("once")) || !pragmaOnceRE.Match(b) {
		return b
	}
	h := sha256.New()
	h.Write(b)
	h.Write([]byte(mtime.UTC().Format(time.DateTime)))
	guard := "__verbsexp_pragma_once_" + hex.EncodeToString(h.Sum(nil)[:12])
	var out bytes.Buffer
	out.Grow(len(b) + 128)
	out.WriteString("#ifndef " + guard + "\n#line 1\n")
	out.Write(pragmaOnceRE.ReplaceAllLiteral(b, []byte("#define "+guard)))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		out.WriteByte('\n')
	}
	out.WriteString("#endif\n")
	return out.Bytes()
}
