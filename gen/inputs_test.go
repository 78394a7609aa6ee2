package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckDiffInputsBounded: every file gen diff and gen check read (the
// manifests, the baseline, the ack file, each file of PKGDIR) is a
// regular file read within a bound. A FIFO used to block for ever and
// /dev/zero (or a link to it) to exhaust memory; now each is refused at
// once, naming the file, or (a file of PKGDIR gen never wrote) ignored.
func TestCheckDiffInputsBounded(t *testing.T) {
	bin := genBinary(t)
	dir := t.TempDir()
	_, pkg := checkPkg(t, checkHeader)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("SKIP: cannot make a FIFO here: %v", err)
	}
	zeroLink := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	// A sparse regular file beyond the manifest bound: refused by size
	// before it is read.
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 300<<20); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(pkg, "abi.json")
	// variant copies pkg with one file replaced: by a FIFO ("fifo"), a
	// link to /dev/zero ("zero") or a 1 GiB sparse file ("huge").
	variant := func(name, kind string) string {
		v := filepath.Join(t.TempDir(), "verbs")
		if err := os.CopyFS(v, os.DirFS(pkg)); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(v, name)
		os.Remove(p)
		var err error
		switch kind {
		case "fifo":
			err = syscall.Mkfifo(p, 0o644)
		case "zero":
			err = os.Symlink("/dev/zero", p)
		case "huge":
			if err = os.WriteFile(p, []byte("// x\n"), 0o644); err == nil {
				err = os.Truncate(p, 1<<30)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	notRegular := "not a regular file"
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"diff old /dev/zero", []string{"diff", "/dev/zero", manifest}, 2, []string{"old manifest: /dev/zero is a character device", notRegular}},
		{"diff new link to /dev/zero", []string{"diff", manifest, zeroLink}, 2, []string{"new manifest: " + zeroLink + " is a character device"}},
		{"diff old FIFO", []string{"diff", fifo, manifest}, 2, []string{fifo + " is a named pipe (FIFO)", notRegular}},
		{"diff ack FIFO", []string{"diff", "-ack", fifo, manifest, manifest}, 2, []string{"ack file: " + fifo + " is a named pipe"}},
		{"diff ack /dev/zero", []string{"diff", "-ack", "/dev/zero", manifest, manifest}, 2, []string{"ack file: /dev/zero is a character device"}},
		{"diff old too large", []string{"diff", big, manifest}, 2, []string{big + " is larger than 256 MiB"}},
		{"check baseline /dev/zero", []string{"check", "-baseline", "/dev/zero", pkg}, 2, []string{"baseline: /dev/zero is a character device"}},
		{"check baseline FIFO", []string{"check", "-baseline", fifo, pkg}, 2, []string{"baseline: " + fifo + " is a named pipe"}},
		{"check baseline too large", []string{"check", "-baseline", big, pkg}, 2, []string{"baseline: " + big + " is larger than 256 MiB"}},
		{"check ack FIFO", []string{"check", "-baseline", manifest, "-ack", fifo, pkg}, 2, []string{"ack file: " + fifo + " is a named pipe"}},
		{"check abi.json FIFO", []string{"check", variant("abi.json", "fifo")}, 2, []string{"abi.json is a named pipe", notRegular}},
		{"check abi.json /dev/zero", []string{"check", variant("abi.json", "zero")}, 2, []string{"abi.json is a character device"}},
		{"check doc.go FIFO", []string{"check", variant("doc.go", "fifo")}, 2, []string{"doc.go is a named pipe"}},
		{"check consts.go FIFO", []string{"check", variant("consts.go", "fifo")}, 2, []string{"cannot read consts.go", "consts.go is a named pipe"}},
		{"check consts.go /dev/zero", []string{"check", variant("consts.go", "zero")}, 2, []string{"consts.go is a character device"}},
		{"check consts.go 1 GiB", []string{"check", variant("consts.go", "huge")}, 1, []string{"consts.go: differs from line 1"}},
		{"check extra FIFO", []string{"check", variant("notes", "fifo")}, 0, []string{"gen check: ok"}},
		{"check extra /dev/zero", []string{"check", variant("zero.go", "zero")}, 0, []string{"gen check: ok"}},
		{"check extra huge", []string{"check", variant("data.bin", "huge")}, 0, []string{"gen check: ok"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			code, out := runCmd(t, exec.CommandContext(ctx, bin, c.args...), nil)
			if ctx.Err() != nil {
				t.Fatalf("gen %v did not finish in 60 s (blocked on a FIFO?)", c.args)
			}
			if code != c.code {
				t.Fatalf("gen %v: exit %d, want %d\n%s", c.args, code, c.code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("gen %v: output lacks %q:\n%s", c.args, w, out)
				}
			}
			if lastMaxRSS > refusalRSS {
				t.Errorf("peak RSS %d MiB, want below %d MiB", lastMaxRSS>>20, refusalRSS>>20)
			}
		})
	}
}
