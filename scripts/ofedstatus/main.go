// Command ofedstatus tells make test and make examples whether MLNX_OFED
// 4.9's packages are there (check DIR), and at the end of make test which
// tests did not run without them (summary LOG, the file the tests append
// to: vendortest.SkipLogEnv).
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "check" && os.Args[1] != "summary") {
		fmt.Fprintln(os.Stderr, "usage: ofedstatus check DEBS_DIR | ofedstatus summary SKIPLOG")
		os.Exit(2)
	}
	if os.Args[1] == "check" {
		check(os.Args[2])
		return
	}
	summary(os.Args[2])
}

const rule = "=============================================================================="

// check prints where the packages are, or a banner saying the tests
// that need them will not run.
func check(dir string) {
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) > 0 {
		fmt.Printf("== MLNX_OFED 4.9 packages: %s (%d .deb): softdev is judged by the vendor's programs\n", dir, len(debs))
		return
	}
	why := "does not exist"
	if _, err := os.Stat(dir); err == nil {
		why = "exists but holds no .deb packages"
	}
	fmt.Printf("%s\n== NO MLNX_OFED 4.9 PACKAGES: %s %s.\n== Everything else runs; the tests that run the vendor's libibverbs, programs and\n== perftest under softdev exec are SKIPPED and counted at the end.\n== %s\n%s\n", rule, dir, why, launch.GetDebs, rule)
}

// summary counts the tests the log names and says how to run them.
func summary(log string) {
	f, err := os.Open(log)
	if err != nil {
		return // nothing was skipped
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Printf("%s\n== %d TESTS DID NOT RUN: they need MLNX_OFED 4.9's packages (make test PASSED WITHOUT THEM):\n", rule, len(lines))
	wd, _ := os.Getwd()
	for _, l := range lines {
		pkg, rest, _ := strings.Cut(l, "\t")
		test, what, _ := strings.Cut(rest, "\t")
		if rel, err := filepath.Rel(wd, pkg); err == nil {
			pkg = "./" + rel
		}
		fmt.Printf("==   %s %s (%s)\n", pkg, test, what)
	}
	fmt.Printf("== To run them: %s\n%s\n", launch.GetDebs, rule)
}
