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

	step("go tool gen check ./internal/verbs (green)")
	base := filepath.Join(mod, "abi", "released.abi.json")
	write("abi/released.abi.json", string(before["abi.json"]))
	out := runIn(t, mod, env, "go", "tool", "gen", "check", "-I", "include", "-baseline", base, "./internal/verbs")
	if !strings.Contains(out, "gen check: ok: ./internal/verbs/") {
		t.Errorf("gen check output:\n%s", out)
	}

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
	cmd := exec.Command("go", "tool", "gen", "check", "-I", "include", "-baseline", base, "./internal/verbs")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), env...)
	o, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("gen check after the header change: %v, want exit 1\n%s", err, o)
	}
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
