package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUserModule walks the README's "Using verbsexp from your own module"
// section in a scratch module that requires this one through a replace
// directive (GOFLAGS=-mod=mod; modules come from GOPROXY as configured,
// no other network): the tool directive, go tool gen into the module's own
// package, a program that builds with it, go generate with the recorded
// directive (the same bytes), gen check green, and then a header change
// that makes gen check fail naming the member.
func TestUserModule(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: builds a scratch module with go get -tool")
	}
	root := repoRoot(t)
	mod := t.TempDir()
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=1"}
	step := func(what string) { t.Logf("%s: %s", time.Now().Format("15:04:05"), what) }
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/app\n\ngo 1.26\n\nrequire github.com/verbsexp/verbsexp v0.0.0\n\nreplace github.com/verbsexp/verbsexp => "+root+"\n")
	// The user's headers: a copy of headers/ (standing in for
	// /usr/include of an installed MLNX_OFED), so the test can change it.
	if err := os.CopyFS(filepath.Join(mod, "include"), os.DirFS(filepath.Join(root, "headers"))); err != nil {
		t.Fatal(err)
	}

	// go get -tool github.com/verbsexp/verbsexp/gen, as the README says,
	// asks the proxy whether a module github.com/verbsexp/verbsexp/gen
	// exists; for a module that is not published the proxy here answers
	// 403, not 404, and go get stops. go mod edit -tool and go mod tidy
	// (the README's offline alternative) write the same go.mod and go.sum.
	step("go mod edit -tool=github.com/verbsexp/verbsexp/gen && go mod tidy")
	runIn(t, mod, env, "go", "mod", "edit", "-tool=github.com/verbsexp/verbsexp/gen")
	runIn(t, mod, env, "go", "mod", "tidy")
	if b, _ := os.ReadFile(filepath.Join(mod, "go.mod")); !strings.Contains(string(b), "tool github.com/verbsexp/verbsexp/gen") {
		t.Fatalf("go get -tool did not add the tool directive:\n%s", b)
	}

	step("go tool gen -I include -o internal/verbs")
	runIn(t, mod, env, "go", "tool", "gen", "-q", "-I", "include", "-o", "internal/verbs")
	write("main.go", `package main

import (
	"fmt"
	"unsafe"

	"example.com/app/internal/verbs"
)

func main() {
	var task verbs.ExpTask
	task.TaskType = verbs.ExpTaskSend
	fmt.Println(unsafe.Sizeof(task), task.TaskType)
}
`)
	step("go vet ./... && go run .")
	runIn(t, mod, env, "go", "vet", "./...")
	if out := runIn(t, mod, env, "go", "run", "."); !strings.HasPrefix(out, "40 ") {
		t.Errorf("the program using the generated package printed %q, want the 40-byte struct ibv_exp_task", out)
	}

	step("go generate ./... (the directive in internal/verbs/doc.go)")
	before := readDir(t, filepath.Join(mod, "internal", "verbs"))
	runIn(t, mod, env, "go", "generate", "./...")
	if after := readDir(t, filepath.Join(mod, "internal", "verbs")); !sameFiles(before, after) {
		t.Error("go generate in the user's module wrote other bytes than go tool gen")
	}

	step("the README's publish-and-check commands, as written (gen check green)")
	block := readmeBlock(t, "gen check -baseline abi/released.abi.json")
	out := runIn(t, mod, env, "sh", "-ec", block)
	for _, w := range []string{"gen check: ok: ./internal/verbs/", "3/3 baseline: ok: nothing breaks", "no abi/ack.txt yet: nothing acknowledged"} {
		if !strings.Contains(out, w) {
			t.Errorf("the README's commands\n%s\nprint no %q:\n%s", block, w, out)
		}
	}
	base := filepath.Join(mod, "abi", "released.abi.json")

	step("a header change: gen check red")
	exp := filepath.Join(mod, "include", "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "struct ibv_exp_task {"
	if !strings.Contains(string(b), anchor) {
		t.Fatalf("%s not in verbs_exp.h", anchor)
	}
	if err := os.WriteFile(exp, []byte(strings.Replace(string(b), anchor, anchor+"\n    uint64_t user_extra;", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	o := genCheckFails(t, mod, env, "-I", "include", "-baseline", base, "./internal/verbs")
	for _, want := range []string{
		"1/3 current:  FAIL: ./internal/verbs/ (committed) is not what gen makes of include now",
		"record-size struct ibv_exp_task: 40 → 48",
		"struct ibv_exp_task.next: offset is not 24 [amd64 arm64 ppc64le] (static assertion failed)",
		"regenerate it: go generate ./internal/verbs",
	} {
		if !strings.Contains(string(o), want) {
			t.Errorf("gen check output lacks %q:\n%s", want, o)
		}
	}

	// The runtime with a release whose ABI differs from the committed
	// package's: the headers now have a struct ibv_exp_task of 48 bytes,
	// whose members all moved, and the runtime's task lists, softdev's
	// provider and the inline ibv_exp_post_task must all agree on it.
	userRelease(t, mod, env, "include", "", step)
}

// TestUserModuleRealRelease walks the runtime path of TestUserModule with
// the real MLNX_OFED 3.4 headers ($VERBSEXP_OFED_RELEASES/3.4/include):
// its ABI differs from the committed package's in dozens of records.
func TestUserModuleRealRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: builds a scratch module")
	}
	rels := os.Getenv("VERBSEXP_OFED_RELEASES")
	if rels == "" {
		t.Skip("SKIPPED: set VERBSEXP_OFED_RELEASES=DIR (DIR/3.4/include/infiniband/verbs_exp.h) to run the runtime against the real 3.4")
	}
	inc := filepath.Join(rels, "3.4", "include")
	if _, err := os.Stat(filepath.Join(inc, "infiniband", "verbs_exp.h")); err != nil {
		t.Skipf("SKIPPED: %v", err)
	}
	root := repoRoot(t)
	mod := t.TempDir()
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=1"}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/app\n\ngo 1.26\n\nrequire github.com/verbsexp/verbsexp v0.0.0\n\nreplace github.com/verbsexp/verbsexp => "+root+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runIn(t, mod, env, "go", "mod", "edit", "-tool=github.com/verbsexp/verbsexp/gen")
	runIn(t, mod, env, "go", "mod", "tidy")
	userRelease(t, mod, env, inc, "struct ibv_exp_", func(what string) { t.Logf("%s: %s", time.Now().Format("15:04:05"), what) })
}

// userRelease runs the README's first task list (ExampleList's body) in
// the module mod on headers inc (relative to mod, or absolute), whose
// ABI differs from the committed package's: built on the committed
// package it fails (its build guard names a record); gen module writes a
// copy of this module generated from inc, a replace directive points at
// it, and the program prints what ExampleList's Output says; gen check on
// the copy is green, then red after the headers change. guard is what the
// failing build must name ("" for struct ibv_exp_task's size).
func userRelease(t *testing.T, mod string, env []string, inc, guard string, step func(string)) {
	t.Helper()
	prog, want := firstTaskList(t)
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	incAbs := inc
	if !filepath.IsAbs(inc) {
		incAbs = filepath.Join(mod, inc)
	}
	if guard == "" {
		guard = "struct ibv_exp_task: size is not 40"
	}
	step("the README's first task list on the committed package, with CGO_CFLAGS=-I " + inc + ": the build guard refuses")
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), append(env, "CGO_CFLAGS=-I"+incAbs)...)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the committed package built against headers whose ABI differs (%s)", inc)
	} else if !strings.Contains(string(out), guard) {
		t.Fatalf("the failing build does not name %q:\n%s", guard, firstLines(string(out), 20))
	}

	step("go tool gen module -I " + inc + " -o third_party/verbsexp")
	out := runIn(t, mod, env, "go", "tool", "gen", "module", "-I", inc, "-o", "third_party/verbsexp")
	for _, w := range []string{"every package builds against it", "go mod edit -replace github.com/verbsexp/verbsexp=./third_party/verbsexp", "go tool gen check third_party/verbsexp/generated"} {
		if !strings.Contains(out, w) {
			t.Errorf("gen module output lacks %q:\n%s", w, out)
		}
	}
	step("go mod edit -replace github.com/verbsexp/verbsexp=./third_party/verbsexp && go mod tidy && go run .")
	runIn(t, mod, env, "go", "mod", "edit", "-replace", "github.com/verbsexp/verbsexp=./third_party/verbsexp")
	runIn(t, mod, env, "go", "mod", "tidy")
	if got := runIn(t, mod, env, "go", "run", "."); got != want {
		t.Errorf("the first task list on softdev with the package generated from %s printed\n%s\nwant (ExampleList's Output)\n%s", inc, got, want)
	}

	step("go tool gen check third_party/verbsexp/generated (green)")
	if out := runIn(t, mod, env, "go", "tool", "gen", "check", "third_party/verbsexp/generated"); !strings.Contains(out, "gen check: ok: third_party/verbsexp/generated/") {
		t.Errorf("gen check output:\n%s", out)
	}
	if filepath.IsAbs(inc) {
		return // real headers are not changed
	}
	step("the headers change again: gen check red, and says how to regenerate the copy")
	exp := filepath.Join(incAbs, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "struct ibv_exp_task {"
	if err := os.WriteFile(exp, []byte(strings.Replace(string(b), anchor, anchor+"\n    uint32_t user_again;", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	o := genCheckFails(t, mod, env, "third_party/verbsexp/generated")
	for _, w := range []string{"record-size struct ibv_exp_task: 48 → 56", "regenerate it: go tool gen module -I " + inc + " -o third_party/verbsexp"} {
		if !strings.Contains(string(o), w) {
			t.Errorf("gen check output lacks %q:\n%s", w, o)
		}
	}
}

// firstTaskList is the README's "Post your first task list" as a
// program: ExampleList's body (runtime/task/example_test.go) in a main,
// and the output its // Output comment says.
func firstTaskList(t *testing.T) (prog, output string) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "runtime", "task", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	const begin, end = "func ExampleList() {\n", "\t// Output:\n"
	i := strings.Index(src, begin)
	j := strings.Index(src[i:], end)
	if i < 0 || j < 0 {
		t.Fatal("runtime/task/example_test.go: no ExampleList with an Output comment")
	}
	body := src[i+len(begin) : i+j]
	k := strings.Index(src[i+j:], "\n}\n")
	var want strings.Builder
	for _, l := range strings.Split(src[i+j+len(end):i+j+k], "\n") {
		want.WriteString(strings.TrimPrefix(strings.TrimSpace(l), "// ") + "\n")
	}
	prog = `package main

import (
	"fmt"
	"log"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

func main() {
` + body + "}\n"
	return prog, want.String()
}

// readmeBlock is the README code block that contains marker, as the
// shell would read it.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(b), "```")[1:] {
		if body, ok := strings.CutPrefix(part, "sh\n"); ok && strings.Contains(body, marker) {
			return body
		}
	}
	t.Fatalf("README.md has no sh block with %q", marker)
	return ""
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

// genCheckFails runs go tool gen check with args in the module mod after
// a header change: it must exit 1; its output is returned.
func genCheckFails(t *testing.T, mod string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "gen", "check"}, args...)...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), env...)
	o, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("gen check after the header change: %v, want exit 1\n%s", err, o)
	}
	return o
}
