package generate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/emit"
)

// TestWriteLinks: header links are written as symbolic links (a dangling
// one too), Current compares them by target, a stale one makes the
// package not current, and the next Write replaces them: they are the
// generator's (Owned), unlike a regular file or another link.
func TestWriteLinks(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pkg")
	files := append(pkgFiles("x"),
		emit.File{Name: "zhdr_a.h", Link: "../include/a.h"},
		emit.File{Name: "zhdr_usr_include_a.h", Link: "/nonexistent/verbsexp/a.h"})
	if err := Write(out, files); err != nil {
		t.Fatal(err)
	}
	for _, f := range files[2:] {
		target, err := os.Readlink(filepath.Join(out, f.Name))
		if err != nil || target != f.Link {
			t.Errorf("%s: link to %q (%v), want %q", f.Name, target, err, f.Link)
		}
		if !Owned(filepath.Join(out, f.Name)) {
			t.Errorf("%s: not the generator's", f.Name)
		}
	}
	if !Current(out, files) {
		t.Fatal("not current right after Write")
	}
	moved := append(pkgFiles("x"), emit.File{Name: "zhdr_a.h", Link: "../other/a.h"}, files[3])
	if Current(out, moved) {
		t.Error("current with a link to another target")
	}
	if Current(out, files[:3]) {
		t.Error("current with a link the generator no longer writes")
	}
	if err := Write(out, moved[:3]); err != nil {
		t.Fatal(err)
	}
	if !Current(out, moved[:3]) {
		t.Error("the second Write did not replace the links")
	}
	if _, err := os.Lstat(filepath.Join(out, "zhdr_usr_include_a.h")); !os.IsNotExist(err) {
		t.Errorf("the link no longer written is still there (%v)", err)
	}
	// A regular file of a link's name, and a link of another name, are not
	// the generator's: Write refuses to replace them.
	writeFile(t, filepath.Join(out, "zhdr_usr_include_a.h"), "mine")
	if Owned(filepath.Join(out, "zhdr_usr_include_a.h")) || Current(out, moved[:3]) {
		t.Error("a regular file named as a header link counts as the generator's")
	}
	if err := Write(out, moved[:3]); err == nil || !strings.Contains(err.Error(), "zhdr_usr_include_a.h") {
		t.Errorf("Write over a user's file: %v", err)
	}
	os.Remove(filepath.Join(out, "zhdr_usr_include_a.h"))
	if err := os.Symlink("../include/a.h", filepath.Join(out, "mine.h")); err != nil {
		t.Fatal(err)
	}
	if Owned(filepath.Join(out, "mine.h")) {
		t.Error("a link of another name counts as the generator's")
	}
}

// TestEncodeFilesLinks: the files cache keeps links as links, and refuses
// an entry that makes a link of anything but a header link.
func TestEncodeFilesLinks(t *testing.T) {
	files := append(pkgFiles("x"), emit.File{Name: "zhdr_a.h", Link: "/usr/include/a.h"})
	got, ok := decodeFiles(encodeFiles(files))
	if !ok || len(got) != len(files) {
		t.Fatalf("decoded %d files (ok %v)", len(got), ok)
	}
	for i, f := range files {
		if got[i].Name != f.Name || string(got[i].Data) != string(f.Data) || got[i].Link != f.Link {
			t.Errorf("file %d: %+v, want %+v", i, got[i], f)
		}
	}
	for _, bad := range []emit.File{{Name: "doc.go", Link: "/etc/passwd"}, {Name: "zhdr_a.h", Data: []byte("x"), Link: "a.h"}} {
		if _, ok := decodeFiles(encodeFiles([]emit.File{bad})); ok {
			t.Errorf("decoded %+v", bad)
		}
	}
}

// TestSources: each header is linked as the package names its -I
// directory; for an entry that defers to the system's namesake
// (#include_next), which is not linked (where it is not installed the
// link would dangle, and go vet fails on that), the preamble reports
// whether the build compiled it while that file was absent, and
// zheaders.go records the file; the records each header defines are
// recorded with their digests.
func TestSources(t *testing.T) {
	withCache(t)
	inc := tree(t, map[string]string{
		"infiniband/verbs_exp.h": "#if 0\n#include_next <infiniband/verbs_exp.h>\n#endif\n#include <infiniband/part.h>\n#include <stdint.h>\nstruct ibv_a { uint32_t a; };\nint ibv_f(struct ibv_a *a);\n",
		"infiniband/part.h":      "struct ibv_b { int b; /* } */ };\n",
	})
	opts := options(amd64Only, inc)
	opts.CFlags = []string{"-I${SRCDIR}/../inc"}
	files, _ := run(t, opts)
	links := 0
	for name, want := range map[string]string{
		"zhdr_infiniband_verbs_exp.h": "symbolic link to ../inc/infiniband/verbs_exp.h",
		"zhdr_infiniband_part.h":      "symbolic link to ../inc/infiniband/part.h",
	} {
		if files[name] != want {
			t.Errorf("%s: %q, want %q", name, files[name], want)
		}
	}
	for name := range files {
		if emit.LinkName(name) {
			links++
		}
	}
	if links != 2 {
		t.Errorf("%d header links, want 2 (one per header, none to the system's)", links)
	}
	z := files["zheaders.go"]
	for _, want := range []string{`Dir: "../inc", Path: "infiniband/verbs_exp.h"`, `{Name: "struct ibv_a", Digest: "`, `{Name: "struct ibv_b", Digest: "`, `Installed: []string{"/usr/include/infiniband/verbs_exp.h"}`} {
		if !strings.Contains(z, want) {
			t.Errorf("zheaders.go lacks %s:\n%s", want, z)
		}
	}
	if !strings.Contains(files["shims.go"], `#if !__has_include("/usr/include/infiniband/verbs_exp.h")`) ||
		!strings.Contains(files["shims.go"], "generatedFrom.Restated = C.verbsexp_RESTATED_ALONE != 0") {
		t.Error("shims.go does not report whether the build compiled the restatement")
	}
	if !strings.Contains(files["doc.go"], "zhdr_*.h files are symbolic links") {
		t.Error("doc.go does not say what the links are")
	}

	// Without -I flags naming the directories (a run that writes no
	// package), nothing is linked, and the restatement is not reported.
	opts.CFlags = nil
	files, _ = run(t, opts)
	for name := range files {
		if emit.LinkName(name) {
			t.Errorf("%s written without a directory to link to", name)
		}
	}
	if strings.Contains(files["shims.go"], "RESTATED_ALONE") {
		t.Error("the restatement reported without the links")
	}
}
