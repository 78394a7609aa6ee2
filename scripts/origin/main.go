// Command origin is the first step of make test and make abi-check: it
// says in one line when generated/verbs/ was generated from other headers than
// the ones the target is about to test against (after make generate
// OFED_INCLUDE=DIR, a plain make test would otherwise fail in hundreds of
// lines, and its "stale" advice would undo the regeneration).
//
//	go run ./scripts/origin TARGET HEADERS [ENTRY]
//
// TARGET is the make target to suggest (test, abi-check); HEADERS the
// include directory make uses (headers, or OFED_INCLUDE); ENTRY make's
// ENTRY, if set.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/verbsexp/verbsexp/internal/gencmd"
)

func main() {
	if len(os.Args) != 3 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/origin TARGET HEADERS [ENTRY]")
		os.Exit(2)
	}
	target, headers, entry := os.Args[1], os.Args[2], ""
	if len(os.Args) == 4 {
		entry = os.Args[3]
	}
	dirs, err := gencmd.IncludeDirs(filepath.Join("generated", "verbs"))
	var args []string
	if err == nil {
		args, err = gencmd.Read(filepath.Join("generated", "verbs"))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "make %s: cannot tell which headers generated/verbs/ comes from: %v; run make generate\n", target, err)
		os.Exit(1)
	}
	was := ""
	if e := gencmd.Value(args, "entry"); len(e) > 0 {
		was = e[len(e)-1]
	}
	if slices.Equal(gencmd.Canonical(dirs), gencmd.Canonical([]string{headers})) {
		if was == entry {
			return
		}
		fmt.Fprintf(os.Stderr, "make %s: generated/verbs/ was generated with ENTRY=%s, not ENTRY=%s: run make %s%s ENTRY=%s, or make generate%s ENTRY=%s to regenerate it\n",
			target, orDefault(was), orDefault(entry), target, ofed(headers), was, ofed(headers), entry)
		os.Exit(1)
	}
	from := strings.Join(dirs, " ")
	if rel, err := filepath.Rel(mustAbs("."), dirs[0]); err == nil && len(dirs) == 1 && !strings.HasPrefix(rel, "..") {
		from = rel
	}
	fmt.Fprintf(os.Stderr, "make %s: generated/verbs/ comes from %s (make generate%s), not %s: run make %s%s, or make generate%s to regenerate it from %s\n",
		target, from, ofed(from), headers, target, ofed(from), ofed(headers), headers)
	os.Exit(1)
}

func orDefault(entry string) string {
	if entry == "" {
		return "(default)"
	}
	return entry
}

func ofed(headers string) string {
	if headers == "headers" {
		return ""
	}
	return " OFED_INCLUDE=" + headers
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
