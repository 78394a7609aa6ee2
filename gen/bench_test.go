package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

var ofed = flag.String("ofed", "", "also benchmark an MLNX_OFED include directory")

// genScenarios are the generator runs BenchmarkGenerateVsGodefs times,
// each with its own cache directory (XDG_CACHE_HOME):
//
//   - unchanged: the inputs of the last run (abi-check, a repeated make
//     generate): the cache holds everything;
//   - headers-changed: the infiniband/ headers differ from the last run
//     (a new OFED release on the same machine); the compilers' answers
//     are cached, nothing else applies;
//   - fresh: an empty cache (a fresh machine), written by the run;
//   - no-cache: VERBSEXP_NO_CACHE=1 (for comparison: no reads, no writes).
var genScenarios = []string{"unchanged", "headers-changed", "fresh", "no-cache"}

// BenchmarkGenerateVsGodefs runs, interleaved in every iteration, the
// built generator as a subprocess (three targets, writing the package)
// in each scenario of genScenarios and `go tool cgo -godefs` producing one
// target's structs for the same records, and prints each scenario's
// median CPU time (user+system, compilers included) and wall time, and
// their ratios to godefs', then the median CPU time of each stage of
// the run (generate.Result.Stages, which gen writes to
// $VERBSEXP_STAGE_CPU: the input checks, the front end's one
// translation, the other targets' probes, layout, rendering) and of the
// rest (starting the process, the cache, writing the package), and the
// C compilers' part of the run (the floor no work of the generator's own
// can lower: the headers' check, the expansion scan's preprocessor, the
// probes). Every
// run's package is compared byte for byte with the one generated without
// the cache.
//
//	make bench-gen [OFED_INCLUDE=/work/ofed/4.6/include]
func BenchmarkGenerateVsGodefs(b *testing.B) {
	sources := map[string]string{"headers": "../headers"}
	if *ofed != "" {
		sources["ofed"] = *ofed
	}
	var names []string
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	bin := genBinaryB(b)
	for _, name := range names {
		inc, err := filepath.Abs(sources[name])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) { benchSource(b, bin, name, inc) })
	}
}

// benchRun is one measured subprocess.
type benchRun struct{ cpu, wall time.Duration }

func measureRun(b *testing.B, cmd *exec.Cmd) benchRun {
	b.Helper()
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	wall := time.Since(start)
	// The rusage of a waited-for process includes its waited-for
	// children: the compilers the generator runs, cgo and gcc under go.
	return benchRun{cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), wall}
}

func benchSource(b *testing.B, bin, name, inc string) {
	tmp := b.TempDir()
	// headers-changed works on a copy whose entry header gets a new
	// constant before every run.
	changed := filepath.Join(tmp, "changed")
	if err := os.CopyFS(changed, os.DirFS(inc)); err != nil {
		b.Fatal(err)
	}
	entry := filepath.Join(changed, "infiniband", "verbs_exp.h")
	original, err := os.ReadFile(entry)
	if err != nil {
		b.Fatal(err)
	}
	caches := map[string]string{}
	for _, s := range genScenarios {
		caches[s] = filepath.Join(tmp, "cache-"+s)
	}
	// Each run writes the CPU time of its stages here (gen's
	// VERBSEXP_STAGE_CPU).
	stagesFile := filepath.Join(tmp, "stages")
	stages := map[string]map[string][]time.Duration{} // scenario → stage → runs
	compilers := map[string][]time.Duration{}         // scenario → the C compilers' CPU per run
	compStages := map[string]map[string][]time.Duration{}
	// Every run writes "-o pkg" from a directory of its own, so that the
	// recorded command, and so the bytes, are the same.
	gen := func(scenario, headers, parent string) *exec.Cmd {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "-q", "-I", headers, "-o", "pkg")
		cmd.Dir = parent
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+caches[scenario], "VERBSEXP_NO_CACHE=", "VERBSEXP_STAGE_CPU="+stagesFile)
		if scenario == "no-cache" {
			cmd.Env = append(cmd.Env, "VERBSEXP_NO_CACHE=1")
		}
		return cmd
	}
	// The reference package, without the cache; it also names the
	// records godefs gets.
	ref := filepath.Join(tmp, "ref")
	measureRun(b, gen("no-cache", inc, ref))
	want := snapshot(b, filepath.Join(ref, "pkg"))
	defs := godefsInput(b, filepath.Join(ref, "pkg", "abi.json"))
	// Warm the caches that start warm.
	measureRun(b, gen("unchanged", inc, filepath.Join(tmp, "warm")))
	measureRun(b, gen("headers-changed", changed, filepath.Join(tmp, "warm")))

	runs := map[string][]benchRun{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("go", "tool", "cgo", "-godefs", "--", "-I", inc, "defs.go")
		cmd.Dir = defs
		runs["godefs"] = append(runs["godefs"], measureRun(b, cmd))
		for _, s := range genScenarios {
			headers := inc
			switch s {
			case "headers-changed":
				headers = changed
				rev := fmt.Sprintf("%s\n#define VERBSEXP_BENCH_REVISION %d\n", original, i)
				if err := os.WriteFile(entry, []byte(rev), 0o644); err != nil {
					b.Fatal(err)
				}
			case "fresh":
				if err := os.RemoveAll(caches[s]); err != nil {
					b.Fatal(err)
				}
			}
			out := filepath.Join(tmp, "out-"+s)
			run := measureRun(b, gen(s, headers, out))
			runs[s] = append(runs[s], run)
			if stages[s] == nil {
				stages[s] = map[string][]time.Duration{}
			}
			if compStages[s] == nil {
				compStages[s] = map[string][]time.Duration{}
			}
			var staged, comp time.Duration
			cpu, cc := readStages(b, stagesFile)
			for name, d := range cpu {
				stages[s][name] = append(stages[s][name], d)
				compStages[s][name] = append(compStages[s][name], cc[name])
				staged += d
				comp += cc[name]
			}
			compilers[s] = append(compilers[s], comp)
			// The rest: starting the process, reading the cache,
			// writing the package.
			stages[s]["rest"] = append(stages[s]["rest"], run.cpu-staged)
			if s != "headers-changed" && !equalSnapshots(snapshot(b, filepath.Join(out, "pkg")), want) {
				b.Fatalf("%s: the package differs from the one generated without the cache", s)
			}
		}
	}
	b.StopTimer()
	// The last headers-changed package equals an uncached run on the same
	// headers.
	fromCache := snapshot(b, filepath.Join(tmp, "out-headers-changed", "pkg"))
	measureRun(b, gen("no-cache", changed, filepath.Join(tmp, "out-headers-changed")))
	if !equalSnapshots(fromCache, snapshot(b, filepath.Join(tmp, "out-headers-changed", "pkg"))) {
		b.Fatal("headers-changed: the package differs from the one generated without the cache")
	}

	if b.N == 1 {
		return // the testing package's first, probing call: the table comes with the real b.N
	}
	godefs := medianRun(runs["godefs"])
	fmt.Printf("\n%s (%s): medians of %d interleaved runs; three targets vs one-target go tool cgo -godefs\n", name, inc, b.N)
	fmt.Printf("%-16s %9s %9s %9s %9s\n", "", "CPU", "ratio", "wall", "ratio")
	fmt.Printf("%-16s %9v %9s %9v %9s\n", "godefs", godefs.cpu.Round(time.Millisecond), "1", godefs.wall.Round(time.Millisecond), "1")
	for _, s := range genScenarios {
		m := medianRun(runs[s])
		cpuRatio, wallRatio := float64(m.cpu)/float64(godefs.cpu), float64(m.wall)/float64(godefs.wall)
		fmt.Printf("%-16s %9v %9.2f %9v %9.2f\n", s, m.cpu.Round(time.Millisecond), cpuRatio, m.wall.Round(time.Millisecond), wallRatio)
		b.ReportMetric(cpuRatio, "cpu-ratio-"+s)
		b.ReportMetric(wallRatio, "wall-ratio-"+s)
	}
	fmt.Printf("goals (CPU ratio): unchanged ≤ 0.5, headers-changed ≤ 1.5, fresh ≤ 3\n\n")
	// The design's split: where each scenario's CPU time goes (medians
	// per stage, so they need not add up to the median total).
	fmt.Printf("CPU per stage (medians): %s\n", strings.Join(stageNames, ", "))
	fmt.Printf("%-16s", "")
	for _, n := range stageNames {
		fmt.Printf(" %16s", n)
	}
	fmt.Println()
	for _, s := range genScenarios {
		fmt.Printf("%-16s", s)
		for _, n := range stageNames {
			d := time.Duration(0)
			if len(stages[s][n]) > 0 {
				d = median(stages[s][n])
			}
			fmt.Printf(" %16v", d.Round(100*time.Microsecond))
		}
		fmt.Println()
	}
	// The part no rendering or front-end work can remove: the C
	// compilers' own CPU time (the headers' check, the front end's
	// expansion scan, every other target's probe; and the compilers'
	// predefined macros and search lists when not cached).
	fmt.Printf("\nof which the C compilers (medians), and their whole run's ratio to godefs:\n")
	for _, s := range genScenarios {
		fmt.Printf("%-16s", s)
		for _, n := range stageNames {
			d := time.Duration(0)
			if len(compStages[s][n]) > 0 {
				d = median(compStages[s][n])
			}
			fmt.Printf(" %16v", d.Round(100*time.Microsecond))
		}
		m := median(compilers[s])
		fmt.Printf("   all %v: %.2f\n", m.Round(100*time.Microsecond), float64(m)/float64(godefs.cpu))
	}
	fmt.Println()
}

// stageNames are generate.Run's stages (generate.Result.Stages) and the
// rest of a run, in order; "model" is a run whose files came from the
// cache, "model and layout" one that rendered them.
var stageNames = []string{"check inputs", "front end", "probes", "model", "model and layout", "emit", "rest"}

// readStages reads the stages file a run wrote (gen's VERBSEXP_STAGE_CPU):
// each stage's CPU time, and the C compilers' part of it.
func readStages(b *testing.B, path string) (cpu, compilers map[string]time.Duration) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("the run wrote no stages: %v", err)
	}
	os.Remove(path)
	cpu, compilers = map[string]time.Duration{}, map[string]time.Duration{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 3 {
			b.Fatalf("stages file: %q", l)
		}
		n, err1 := strconv.ParseInt(f[1], 10, 64)
		c, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			b.Fatalf("stages file: %q", l)
		}
		cpu[f[0]], compilers[f[0]] = time.Duration(n), time.Duration(c)
	}
	return cpu, compilers
}

// medianRun takes the medians of CPU and wall time separately.
func medianRun(rs []benchRun) benchRun {
	var cpu, wall []time.Duration
	for _, r := range rs {
		cpu, wall = append(cpu, r.cpu), append(wall, r.wall)
	}
	return benchRun{median(cpu), median(wall)}
}

// godefsInput writes defs.go naming every record of the manifest, the
// same set the generator lays out, into a temporary directory.
func godefsInput(b *testing.B, abi string) string {
	m, err := manifest.Read(abi)
	if err != nil {
		b.Fatal(err)
	}
	var src strings.Builder
	src.WriteString("package verbs\n\n/*\n#include <infiniband/verbs_exp.h>\n*/\nimport \"C\"\n\n")
	for i, r := range m.Arches["amd64"].Records {
		if strings.Contains(r.C, ".") {
			continue // a nested record has no C name of its own
		}
		kind, tag, _ := strings.Cut(r.C, " ")
		fmt.Fprintf(&src, "type T%d C.%s_%s\n", i, kind, tag)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "defs.go"), []byte(src.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
