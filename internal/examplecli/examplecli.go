// Package examplecli is what the example commands share: a -h that says
// what the program does before its flags, and for their tests, a way to
// run the command's main in a child process (the test binary, re-run).
package examplecli

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Usage makes -h print "usage: go run ./examples/NAME [flags]", what the
// program does, then the flags.
func Usage(name, what string) {
	flag.Usage = func() {
		w := flag.CommandLine.Output()
		fmt.Fprintf(w, "usage: go run ./examples/%s [flags]\n\n%s\n\nFlags:\n", name, what)
		flag.PrintDefaults()
	}
}

// mainEnv, set in a child's environment, makes Main run the command.
const mainEnv = "VERBSEXP_EXAMPLE_MAIN"

// Main is TestMain for an example's tests: in a child started by Run it
// runs the command's main, else the tests.
func Main(m *testing.M, main func()) {
	if os.Getenv(mainEnv) == "1" {
		// The command's flags only, not the test binary's.
		flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
		flag.CommandLine.Usage = func() { flag.Usage() }
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// MainEnv is the environment entry that makes a child started from the
// test binary run the command's main (see Main): for a launcher (srun,
// mpirun) that starts the test binary as the program.
const MainEnv = mainEnv + "=1"

// Run runs the command's main with args in a child process (the test
// binary, see Main) and returns its exit status and output.
func Run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), MainEnv)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestUsage checks that the command's -h begins with its usage line and
// what (how it says what it does), then lists its own flags (not the
// test binary's).
func TestUsage(t *testing.T, name, what string) {
	t.Helper()
	code, out := Run(t, "-h")
	if code != 0 || !strings.HasPrefix(out, "usage: go run ./examples/"+name+" [flags]\n\n"+what) || !strings.Contains(out, "Flags:\n  -") || strings.Contains(out, "test.") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
}
