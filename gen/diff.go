package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/verbsexp/verbsexp/gen/internal/diff"
	"github.com/verbsexp/verbsexp/internal/manifest"
)

// runDiff is `gen diff OLD.json NEW.json`: it reports what changed between
// two manifests and exits 0 (nothing breaking), 1 (breaking changes that
// the -ack file does not list) or 2 (unusable input).
func runDiff(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "say why each change is compatible or breaking")
	ackFile := fs.String("ack", "", "`FILE` of acknowledged breaking changes, one \"KIND SUBJECT\" per line as the report prints them")
	anchored := fs.String("end-anchored", strings.Join(diff.DefaultEndAnchored, ","), "comma-separated C `RECORDS` whose members are addressed from the end (\"grows up\" records)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gen diff [-json] [-v] [-ack FILE] OLD.json NEW.json\n\n")
		fmt.Fprintf(stderr, "Compares two abi.json manifests per arch and classifies each change as compatible\n")
		fmt.Fprintf(stderr, "or breaking for Go code compiled against OLD. Exit status: 0 no breaking change,\n")
		fmt.Fprintf(stderr, "1 breaking changes (not acknowledged), 2 bad input.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	oldPath, newPath := fs.Arg(0), fs.Arg(1)
	old, err := manifest.Read(oldPath)
	if err != nil {
		fmt.Fprintf(stderr, "gen diff: old manifest: %v\n", err)
		return 2
	}
	cur, err := manifest.Read(newPath)
	if err != nil {
		fmt.Fprintf(stderr, "gen diff: new manifest: %v\n", err)
		return 2
	}
	var acks []string
	if *ackFile != "" {
		// An ack file that does not exist yet acknowledges nothing (as in
		// gen check).
		if acks, err = diff.ReadAcks(*ackFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "gen diff: ack file: %v\n", err)
			return 2
		}
	}
	var opt diff.Options
	for _, r := range strings.Split(*anchored, ",") {
		if r = strings.TrimSpace(r); r != "" {
			opt.EndAnchored = append(opt.EndAnchored, r)
		}
	}
	rep := diff.NewReport(oldPath, newPath, diff.Compare(old, cur, opt), acks)
	if *asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "gen diff: %v\n", err)
			return 2
		}
	} else {
		rep.WriteText(stdout, *verbose)
	}
	if rep.Breaking > 0 {
		if !*asJSON {
			n, _, _ := rep.Distinct()
			fmt.Fprintf(stderr, "gen diff: %d breaking change(s) for Go code compiled against %s; review them, then list the accepted ones in an -ack file\n", n, oldPath)
		}
		return 1
	}
	return 0
}
