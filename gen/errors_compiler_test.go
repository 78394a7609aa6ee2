package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

// The rows of docs/errors.md about target compilers and the cache:
// a compiler must prove it is its target's before its answers are used,
// and a damaged cache is ignored and rewritten, never trusted.
func init() {
	for id, c := range map[string]errorCase{
		"compiler-wrong-arch": func(t *testing.T, bin string) (int, string) {
			if runtime.GOARCH != "amd64" {
				t.Skipf("SKIP: compiler-wrong-arch names the host gcc as x86_64; this host is %s", runtime.GOARCH)
			}
			return compilerCase(t, bin, "gcc")
		},
		"compiler-false": func(t *testing.T, bin string) (int, string) { return compilerCase(t, bin, "/bin/false") },
		"compiler-exit-1": func(t *testing.T, bin string) (int, string) {
			return compilerCase(t, bin, fakeCompiler(t, "echo 'fatal error: no license' >&2; exit 1"))
		},
		"compiler-no-libc":   compilerNoLibc,
		"cache-damaged":      cacheDamaged,
		"cache-wrong-target": cacheWrongTarget,
	} {
		errorCases[id] = c
	}
}

// compilerCase generates for arm64 with VERBSEXP_CC_ARM64=cc, with and
// without a cache: both refuse, and the cache holds no answer of it.
func compilerCase(t *testing.T, bin, cc string) (int, string) {
	inc := writeHeader(t, goodHeader)
	cacheDir := t.TempDir()
	env := []string{"VERBSEXP_CC_ARM64=" + cc, "XDG_CACHE_HOME=" + cacheDir, "VERBSEXP_NO_CACHE="}
	code, out := runGen(t, bin, env, "-I", inc, "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "arm64")
	if c, o := runGen(t, bin, append(env, "VERBSEXP_NO_CACHE=1"), "-I", inc, "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "arm64"); c != code || o != out {
		t.Errorf("without the cache: exit %d, %q; with it: exit %d, %q", c, o, code, out)
	}
	if files := cacheFiles(t, cacheDir); len(files) != 0 {
		t.Errorf("a refused compiler left cache entries: %v", files)
	}
	return code, out
}

func fakeCompiler(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "fakecc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// compilerNoLibc: the arm64 cross compiler with its libc directory
// moved away, as after installing gcc-aarch64-linux-gnu without
// libc6-dev-arm64-cross; then the directory appears (the package is
// installed) and the same command succeeds although the compiler's
// answers were cached.
func compilerNoLibc(t *testing.T, bin string) (int, string) {
	real, err := exec.LookPath("aarch64-linux-gnu-gcc")
	if err != nil {
		t.Skip("SKIP: compiler-no-libc needs aarch64-linux-gnu-gcc (make toolchains)")
	}
	gccInc, err := exec.Command(real, "-print-file-name=include").Output()
	if err != nil {
		t.Fatal(err)
	}
	libc := "/usr/aarch64-linux-gnu/include"
	moved := filepath.Join(t.TempDir(), "include")
	cc := fakeCompiler(t, "exec "+real+" -nostdinc -isystem "+strings.TrimSpace(string(gccInc))+" -idirafter "+moved+` "$@"`)
	env := []string{"VERBSEXP_CC_ARM64=" + cc, "XDG_CACHE_HOME=" + t.TempDir(), "VERBSEXP_NO_CACHE="}
	inc := writeHeader(t, goodHeader)
	out := filepath.Join(t.TempDir(), "pkg")
	code, msg := runGen(t, bin, env, "-I", inc, "-o", out, "-arch", "arm64")
	if err := os.Symlink(libc, moved); err != nil {
		t.Fatal(err)
	}
	if c, o := runGen(t, bin, env, "-q", "-I", inc, "-o", out, "-arch", "arm64"); c != 0 {
		t.Errorf("after the libc headers appeared: exit %d\n%s", c, o)
	}
	return code, msg
}

// cacheDamaged: every entry of a warm cache damaged (a byte flipped,
// or cut short); the run succeeds with the package an uncached run
// writes, and leaves every entry whole again.
func cacheDamaged(t *testing.T, bin string) (int, string) {
	inc := writeHeader(t, goodHeader)
	// Every run writes "-o pkg" from a directory of its own: the command
	// line is in the files, and so in the key of the cached files.
	gen := func(env []string, args ...string) (string, int, string) {
		parent := t.TempDir()
		cmd := exec.Command(bin, append(args, "-I", inc, "-o", "pkg")...)
		cmd.Dir = parent
		code, msg := runCmd(t, cmd, env)
		return filepath.Join(parent, "pkg"), code, msg
	}
	want, c, o := gen([]string{"VERBSEXP_NO_CACHE=1"}, "-q")
	if c != 0 {
		t.Fatalf("uncached run: %s", o)
	}
	var code int
	var msg string
	for _, damage := range []func([]byte) []byte{
		func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b },
		func(b []byte) []byte { return b[:len(b)/3] },
	} {
		cacheDir := t.TempDir()
		env := []string{"XDG_CACHE_HOME=" + cacheDir, "VERBSEXP_NO_CACHE="}
		if _, c, o := gen(env, "-q"); c != 0 {
			t.Fatalf("warming the cache: %s", o)
		}
		files := cacheFiles(t, cacheDir)
		if len(files) < 3 {
			t.Fatalf("the cache holds %d entries; want the compilers', the translations' and the files'", len(files))
		}
		damaged := map[string][]byte{}
		for _, f := range files {
			b, _ := os.ReadFile(f)
			damaged[f] = damage(b)
			os.WriteFile(f, damaged[f], 0o644)
		}
		var out string
		out, code, msg = gen(env)
		if !equalSnapshots(snapshot(t, out), snapshot(t, want)) {
			t.Errorf("with a damaged cache the package differs from the uncached one")
		}
		for _, f := range files {
			if b, err := os.ReadFile(f); err != nil || bytes.Equal(b, damaged[f]) {
				t.Errorf("damaged entry %s not rewritten (%v)", f, err)
			}
		}
	}
	return code, msg
}

// cacheWrongTarget: the cached answers of arm64's compiler replaced by
// amd64's (checksums intact): the run notices, asks the compiler again
// and lays out arm64 as arm64 (a pthread_mutex_t is 40 bytes on amd64
// and 48 on arm64).
func cacheWrongTarget(t *testing.T, bin string) (int, string) {
	inc := writeHeader(t, "#include <pthread.h>\nstruct ibv_m { pthread_mutex_t m; };\n")
	cacheDir := t.TempDir()
	env := []string{"XDG_CACHE_HOME=" + cacheDir, "VERBSEXP_NO_CACHE="}
	entries := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		before := map[string]bool{}
		for _, f := range cacheFiles(t, filepath.Join(cacheDir, "verbsexp", "v2", "cc")) {
			before[f] = true
		}
		if c, o := runGen(t, bin, append(env, "VERBSEXP_NO_CACHE="), "-q", "-I", inc, "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", arch); c != 0 {
			t.Fatalf("%s: %s", arch, o)
		}
		for _, f := range cacheFiles(t, filepath.Join(cacheDir, "verbsexp", "v2", "cc")) {
			if !before[f] {
				entries[arch] = f
			}
		}
	}
	if entries["amd64"] == "" || entries["arm64"] == "" {
		t.Fatalf("no compiler cache entries: %v", entries)
	}
	b, err := os.ReadFile(entries["amd64"])
	if err != nil {
		t.Fatal(err)
	}
	// Entries are a header line, the key, the payload's sum, the
	// payload: arm64's key over amd64's sum and payload.
	arm, _ := os.ReadFile(entries["arm64"])
	amd, armParts := bytes.SplitN(b, []byte("\n"), 4), bytes.SplitN(arm, []byte("\n"), 4)
	if len(amd) != 4 || len(armParts) != 4 {
		t.Fatal("cache entries are not as this test knows them")
	}
	forged := bytes.Join([][]byte{armParts[0], armParts[1], amd[2], amd[3]}, []byte("\n"))
	if err := os.WriteFile(entries["arm64"], forged, 0o644); err != nil {
		t.Fatal(err)
	}
	// No other entry may answer for arm64.
	for _, kind := range []string{"unit", "files"} {
		os.RemoveAll(filepath.Join(cacheDir, "verbsexp", "v2", kind))
	}
	out := filepath.Join(t.TempDir(), "pkg")
	code, msg := runGen(t, bin, env, "-I", inc, "-o", out, "-arch", "arm64")
	if code == 0 {
		if got := checkPackageDirArch(t, out, "arm64"); got != 48 {
			t.Errorf("struct ibv_m is %d bytes on arm64, want 48 (amd64's is 40)", got)
		}
	}
	return code, msg
}

// checkPackageDirArch returns the size of the first record of the
// manifest on arch.
func checkPackageDirArch(t *testing.T, dir, arch string) int64 {
	m, err := manifest.Read(filepath.Join(dir, "abi.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := m.Arches[arch]
	if !ok || len(a.Records) == 0 {
		t.Fatalf("manifest has no records for %s", arch)
	}
	return a.Records[0].Size
}

// cacheFiles lists the entries under dir.
func cacheFiles(t *testing.T, dir string) []string {
	var r []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			r = append(r, p)
		}
		return nil
	})
	return r
}
