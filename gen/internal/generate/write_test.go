package generate

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/emit"

	"github.com/verbsexp/verbsexp/internal/scratch"
)

// pkgFiles is a small package as the generator writes it.
func pkgFiles(text string) []emit.File {
	return []emit.File{
		{Name: "abi.json", Data: []byte("{\n  \"version\": 1,\n  \"generator\": \"" + emit.Generator + "\"\n}\n")},
		{Name: "doc.go", Data: []byte("// gen\n// " + emit.Marker + "\n\npackage pkg // " + text + "\n")},
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWriteRemovesAbandonedScratch: the scratch directories killed runs
// left behind are removed by the next run, however recent; one a running
// generator holds (its lock, here taken through another open file, as
// another process would), one holding something else, another
// package's, and user directories that look alike are left alone.
func TestWriteRemovesAbandonedScratch(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "pkg")
	prefix := scratchPrefix(out)
	old := filepath.Join(parent, prefix+"123")
	oldAside := filepath.Join(parent, prefix+"123.old")
	fresh := filepath.Join(parent, prefix+"456") // a killed run's, a moment ago
	live := filepath.Join(parent, prefix+"777")
	liveOld := filepath.Join(parent, prefix+"778") // a run that has been going for long
	foreign := filepath.Join(parent, prefix+"789") // holds a file the generator does not write
	other := filepath.Join(parent, scratchPrefix(filepath.Join(parent, "other"))+"123")
	lookalike := filepath.Join(parent, ".pkg.new-keep")
	for _, d := range []string{old, oldAside, fresh, live, liveOld, other, lookalike} {
		for _, f := range pkgFiles("old") {
			writeFile(t, filepath.Join(d, f.Name), string(f.Data))
		}
	}
	writeFile(t, filepath.Join(foreign, "notes.txt"), "mine")
	past := time.Now().Add(-2 * abandonedAge)
	for _, d := range []string{old, oldAside, liveOld, foreign, other, lookalike} {
		if err := os.Chtimes(d, past, past); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{live, liveOld} {
		lock, busy, err := scratch.Lock(d, false)
		if err != nil || busy {
			t.Skipf("SKIP: cannot lock a directory here (%v, busy %v): scratch directories go by age", err, busy)
		}
		defer lock.Close()
	}
	if err := Write(out, pkgFiles("new")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{old, oldAside, fresh} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("abandoned %s still there", d)
		}
	}
	for _, d := range []string{live, liveOld, foreign, other, lookalike} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
	if left := scratchLeft(t, parent); len(left) != 4 {
		t.Errorf("left %v, want the 2 live, the foreign and the other package's", left)
	}
}

// scratchHelperEnv makes the test binary a generator run that has made
// its scratch directory (for out, the variable's value) and is still
// running: it prints the directory and waits to be killed.
const scratchHelperEnv = "VERBSEXP_TEST_SCRATCH_HOLDER"

func TestMain(m *testing.M) {
	if out := os.Getenv(scratchHelperEnv); out != "" {
		dir, _, err := scratch.Make(filepath.Dir(out), scratchPrefix(out))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.WriteFile(filepath.Join(dir, "doc.go"), pkgFiles("half")[1].Data, 0o644)
		fmt.Println(dir)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWriteAfterKilledRuns: runs killed with SIGKILL while their scratch
// directories stood (processes of their own) leave them behind; the next
// run for the same -o removes them, and never one of a run still going.
func TestWriteAfterKilledRuns(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "pkg")
	start := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), scratchHelperEnv+"="+out)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || strings.HasPrefix(line, "error:") {
			t.Fatalf("the holder: %q %v", line, err)
		}
		return cmd, strings.TrimSpace(line)
	}
	exists := func(d string) bool { _, err := os.Stat(d); return err == nil }
	killed, killedDir := start()
	_, liveDir := start()
	// Both running: neither is touched.
	if err := Write(out, pkgFiles("one")); err != nil {
		t.Fatal(err)
	}
	if !exists(killedDir) || !exists(liveDir) {
		t.Fatalf("a running generator's scratch directory was removed (%v %v)", exists(killedDir), exists(liveDir))
	}
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	if err := Write(out, pkgFiles("two")); err != nil {
		t.Fatal(err)
	}
	if exists(killedDir) {
		t.Errorf("the killed run's %s is still there", killedDir)
	}
	if !exists(liveDir) {
		t.Errorf("the running generator's %s was removed", liveDir)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "doc.go")); !strings.Contains(string(b), "two") {
		t.Errorf("the package was not written: %q", b)
	}
}

// TestWriteGlobInName: -o '/dir/*' (a shell that did not expand it) is a
// package named "*", and no user directory of /dir is touched.
func TestWriteGlobInName(t *testing.T) {
	parent := t.TempDir()
	keep := filepath.Join(parent, ".mydata.new-keep")
	writeFile(t, filepath.Join(keep, "data"), "precious")
	past := time.Now().Add(-2 * abandonedAge)
	os.Chtimes(keep, past, past)
	if err := Write(filepath.Join(parent, "*"), pkgFiles("new")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(keep, "data")); err != nil || string(b) != "precious" {
		t.Errorf("%s was touched: %q %v", keep, b, err)
	}
}

// TestWriteRefusesOthersFiles: only the generator's own files (its
// marker, its file names) may be replaced.
func TestWriteRefusesOthersFiles(t *testing.T) {
	for name, data := range map[string]string{
		"pill_string.go": "// Code generated by \"stringer -type=Pill\"; DO NOT EDIT.\n\npackage pkg\n",
		"mock_verbs.go":  "// Code generated by MockGen. DO NOT EDIT.\npackage pkg\n",
		"doc.go":         "// Code generated by \"stringer\"; DO NOT EDIT.\n\npackage pkg\n",
		"helper.c":       "// " + emit.Marker + "\nint x;\n",
		"stubs_linux.c":  "int hand_written;\n",
		"abi.json":       "{\"version\": 1, \"generator\": \"someone/else\"}\n",
		"notes.txt":      "mine\n",
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "pkg")
			writeFile(t, filepath.Join(out, name), data)
			err := Write(out, pkgFiles("new"))
			if err == nil || !strings.Contains(err.Error(), name+", which the generator did not write") {
				t.Fatalf("err = %v, want a refusal naming %s", err, name)
			}
			if b, _ := os.ReadFile(filepath.Join(out, name)); string(b) != data {
				t.Errorf("%s changed", name)
			}
		})
	}
}

// TestWriteReplacesOwnFiles: a previous package of the generator,
// including per-arch files of targets no longer generated, is replaced.
func TestWriteReplacesOwnFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pkg")
	for _, f := range pkgFiles("old") {
		writeFile(t, filepath.Join(out, f.Name), string(f.Data))
	}
	writeFile(t, filepath.Join(out, "ztypes_linux_riscv64.go"), "// gen\n// "+emit.Marker+"\n\npackage pkg\n")
	if err := Write(out, pkgFiles("new")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 2 {
		t.Errorf("%d files, want 2", len(entries))
	}
	if b, _ := os.ReadFile(filepath.Join(out, "doc.go")); !strings.Contains(string(b), "new") {
		t.Errorf("doc.go not replaced")
	}
}

// TestWriteFollowsSymlink: -o a link to a package replaces the package
// it points to and keeps the link.
func TestWriteFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real", "pkg")
	link := filepath.Join(dir, "link")
	for _, f := range pkgFiles("old") {
		writeFile(t, filepath.Join(target, f.Name), string(f.Data))
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, pkgFiles("new")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "doc.go")); !strings.Contains(string(b), "new") {
		t.Errorf("the link's target was not updated")
	}
	if left := scratchLeft(t, filepath.Dir(target)); len(left) > 0 || len(scratchLeft(t, dir)) > 0 {
		t.Errorf("scratch directories left: %v", left)
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "missing"), dangling)
	if err := Write(dangling, pkgFiles("new")); err == nil || !strings.Contains(err.Error(), "is a symbolic link to") {
		t.Errorf("dangling link: err = %v", err)
	}
}

// TestWriteKeepsMode: the new package has the previous directory's
// permissions, and nothing is left next to it.
func TestWriteKeepsMode(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "pkg")
	for _, f := range pkgFiles("old") {
		writeFile(t, filepath.Join(out, f.Name), string(f.Data))
	}
	if err := os.Chmod(out, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := Write(out, pkgFiles("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want 0555 (%v)", fi.Mode(), err)
	}
	if left := scratchLeft(t, parent); len(left) > 0 {
		t.Errorf("left next to the package: %v", left)
	}
}

// TestWriteLostRace: a first write that finds -o created meanwhile says
// so, and claims no previous package.
func TestWriteLostRace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pkg")
	beforeRename = func() { writeFile(t, filepath.Join(out, "doc.go"), "another run\n") }
	defer func() { beforeRename = nil }()
	err := Write(out, pkgFiles("new"))
	if err == nil || !strings.Contains(err.Error(), "it did not exist when this run started") || strings.Contains(err.Error(), "previous one was kept") {
		t.Fatalf("err = %v", err)
	}
	if left := scratchLeft(t, filepath.Dir(out)); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// scratchLeft lists the generator's scratch directories in dir.
func scratchLeft(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var r []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), scratchMark) {
			r = append(r, e.Name())
		}
	}
	return r
}
