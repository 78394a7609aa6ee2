package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/target"
)

// cost is what one generation took: bytes allocated by this process
// (model, layout, emit: the C front end runs in a child), and CPU time of
// this process and of the children it waited for (the front end, the
// compiler check).
type cost struct {
	alloc uint64
	cpu   time.Duration
}

func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// measure generates header for linux/amd64 (and, when typeCheck is set,
// writes the package and type-checks it with go/types, as the Go
// toolchain would) and returns the cheaper of two runs, and the error of
// the generation.
func measure(t *testing.T, header string, typeCheck bool) (cost, error) {
	t.Helper()
	// The generation itself, both runs: the cache would answer the second.
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	amd64, _ := target.Lookup("amd64")
	inc := writeHeader(t, header)
	best := cost{alloc: ^uint64(0), cpu: 1 << 62}
	var runErr error
	for i := 0; i < 2; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c0 := cpuTime()
		res, err := generate.Run(generate.Options{
			Parse:   parse.Options{IncludeDirs: []string{inc}, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope},
			Targets: []target.Target{amd64},
			Package: "pkg",
		})
		if err == nil && typeCheck {
			out := filepath.Join(t.TempDir(), "pkg")
			if err := generate.Write(out, res.Files); err != nil {
				t.Fatal(err)
			}
			checkPackageDir(t, out)
		}
		c := cost{cpu: cpuTime() - c0}
		runtime.ReadMemStats(&after)
		c.alloc = after.TotalAlloc - before.TotalAlloc
		best.alloc, best.cpu, runErr = min(best.alloc, c.alloc), min(best.cpu, c.cpu), err
	}
	return best, runErr
}

// TestGenerationBounded feeds the generator, at two sizes, many
// declarations, a wide record, deep nesting, records nested by value,
// many macros, a long macro chain and large input, and checks how its
// cost grows. Wall time is never asserted (this machine is shared and
// loaded): the bounds are on ratios of bytes allocated, which do not
// depend on load, and, more loosely, of CPU time (the cheaper of two
// runs each):
//
//   - the linear cases grow their input 8 times: linear growth gives
//     ratios near 8 (less: fixed costs), quadratic 64; the bounds, 12
//     for allocations and 16 for CPU time, catch growth of exponent 1.2
//     (1.33 for CPU time) and more while leaving room for the noise of a
//     loaded 2-core machine (measured: 5-9). The quadratic loops the
//     model had (a record's C name compared in a loop over every record,
//     findReachable per member) show 19 to 25 here;
//   - nesting grows 4 times and is quadratic by design (each nested
//     type's Go name and manifest paths spell the path to it: output
//     grows as depth², which the nesting limit of 1000 bounds), so its
//     bounds are 24 and 40; what they catch is exponential growth, as
//     go/types computing sizes without memoizing did (2^depth: the
//     type-check of the 120-deep package never ended);
//   - one long chain of macros costs any C preprocessor n³ (the front
//     end's limits bound it): its bounds, 100 and 150 (cubic is 64),
//     catch exponential growth;
//   - beyond the input limits, or the limits of the C front end's child
//     process (lowered here to 4 s of CPU and 384 MiB), the generator
//     refuses, saying which, having allocated little itself: at most 64
//     MiB (a 4 MiB header, its copies and its tokens) and 10 s of CPU
//     with the child's.
func TestGenerationBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: TestGenerationBounded generates large inputs; not in -short")
	}
	amd64, _ := target.Lookup("amd64")
	if _, err := amd64.Compiler(); err != nil {
		t.Skipf("SKIP: TestGenerationBounded needs the amd64 C compiler: %v", err)
	}
	decls := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "struct ibv_s%d { int a; long b; };\n", i)
		}
		return b.String()
	}
	wide := func(n int) string {
		var b strings.Builder
		b.WriteString("struct ibv_wide {\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "\tint m%d;\n", i)
		}
		b.WriteString("};\n")
		return b.String()
	}
	// n macros in chains of 4, each using the one before.
	macros := func(n int) string {
		var b strings.Builder
		b.WriteString("struct ibv_m { int a; };\n")
		for i := 0; i < n; i++ {
			if i%4 == 0 {
				fmt.Fprintf(&b, "#define IBV_M%d %d\n", i, i)
			} else {
				fmt.Fprintf(&b, "#define IBV_M%d (IBV_M%d * 2 + 1)\n", i, i-1)
			}
		}
		return b.String()
	}
	// One chain of n macros, each using the one before: its expansion
	// work, as any C preprocessor does it, grows as n³ (the i-th expands
	// to i levels, each token carrying a hide set of up to i names).
	chain := func(n int) string {
		var b strings.Builder
		b.WriteString("struct ibv_m { int a; };\n#define IBV_C0 1\n")
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, "#define IBV_C%d (IBV_C%d + 1)\n", i, i-1)
		}
		return b.String()
	}
	blank := func(n int) string { return "struct ibv_b { int a; };\n" + strings.Repeat("\n", n) }
	for _, c := range []struct {
		name       string
		small, big string
		allocBound float64
		cpuBound   float64
		typeCheck  bool
	}{
		{"declarations 500 → 4000", decls(500), decls(4000), 12, 16, false},
		{"record of 2000 → 16000 members", wide(2000), wide(16000), 12, 16, false},
		{"nesting 30 → 120 (type-checked)", nestedHeader("struct", 30), nestedHeader("struct", 120), 24, 40, true},
		{"records by value 5 → 40 deep (type-checked)", byValueHeader(5), byValueHeader(40), 12, 16, true},
		{"input 25 000 → 200 000 blank lines", blank(25_000), blank(200_000), 12, 16, false},
		{"macros 500 → 4000", macros(500), macros(4000), 12, 16, false},
		{"macro chain 20 → 80 (cubic by nature)", chain(20), chain(80), 100, 150, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			small, err := measure(t, c.small, c.typeCheck)
			if err != nil {
				t.Fatalf("small: %v", err)
			}
			big, err := measure(t, c.big, c.typeCheck)
			if err != nil {
				t.Fatalf("big: %v", err)
			}
			ra, rc := float64(big.alloc)/float64(small.alloc), big.cpu.Seconds()/small.cpu.Seconds()
			t.Logf("allocated %d → %d MiB (×%.1f), CPU %v → %v (×%.1f)", small.alloc>>20, big.alloc>>20, ra, small.cpu.Round(time.Millisecond), big.cpu.Round(time.Millisecond), rc)
			if ra > c.allocBound {
				t.Errorf("allocations grew ×%.1f, bound ×%v", ra, c.allocBound)
			}
			if rc > c.cpuBound {
				t.Errorf("CPU time grew ×%.1f, bound ×%v", rc, c.cpuBound)
			}
		})
	}
	// Beyond the limits: refused, cheaply.
	t.Setenv("VERBSEXP_FRONT_END_CPU", "4")
	t.Setenv("VERBSEXP_FRONT_END_MEMORY", "384")
	const frontEnd = "the C front end the generator reads the headers with (modernc.org/cc/v4)"
	for _, c := range []struct{ name, header, want string }{
		{"nesting 1001", nestedHeader("struct", 1001), "nests unnamed records more than 1000 deep"},
		{"macro chain 5000", chain(5000), frontEnd},
		{"exponential macros", exponentialHeader, frontEnd},
		{"2M-term macro", "#define IBV_S 1" + strings.Repeat("+1", 2000000) + "\n", frontEnd},
		{"100 000 nested parentheses", "#define IBV_P " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + "\n", "nest them less"},
		{"2.7 MB of chained macros", stormHeader, "verbs_exp.h:" /* the macro's line */},
		{"5 MB header", blank(5 << 20), "larger than 4 MiB"},
		{"300 000 lines", blank(300_000), "exceed 262144 lines"},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			got, err := measure(t, c.header, false)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			t.Logf("refused after allocating %d MiB, CPU %v", got.alloc>>20, got.cpu.Round(time.Millisecond))
			if got.alloc > 64<<20 || got.cpu > 10*time.Second {
				t.Errorf("refusing cost %d MiB and %v, bound 64 MiB and 10 s", got.alloc>>20, got.cpu)
			}
		})
	}
}
