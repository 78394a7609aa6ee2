package generate

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/emit"
)

// Write replaces dir with exactly files, atomically: everything is written
// to a sibling temporary directory first and swapped in (one
// renameat2(RENAME_EXCHANGE) on Linux, else renames), so a failed or
// killed run leaves the previous package as it was. dir must be absent,
// empty, or hold only files this generator wrote.
func Write(dir string, files []emit.File) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := checkOwned(dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %v; choose a writable -o directory", parent, err)
	}
	removeAbandoned(parent, "."+filepath.Base(dir)+".new-")
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-")
	if err != nil {
		return fmt.Errorf("cannot write next to %s: %v; check the permissions of %s or choose another -o", dir, err, parent)
	}
	defer os.RemoveAll(tmp)
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(tmp, f.Name), f.Data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %v (nothing in %s was changed)", f.Name, err, dir)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		// One atomic swap where the kernel can: the previous package is
		// then in tmp, removed by the deferred RemoveAll.
		if exchange(tmp, dir) == nil {
			return nil
		}
	}
	// No exchange: two renames, with a moment in which dir is absent and
	// the previous package sits in tmp.old.
	old := ""
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("cannot replace %s: %v (nothing was changed)", dir, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			os.Rename(old, dir)
		}
		return fmt.Errorf("cannot move the new package into %s: %v (the previous one was kept)", dir, err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return nil
}

// abandonedAge is how old a scratch directory must be before a later run
// treats it as left behind by a killed run (and not as a concurrent one's).
const abandonedAge = 10 * time.Minute

// removeAbandoned deletes scratch directories (prefix*) that killed runs
// left next to the output directory.
func removeAbandoned(parent, prefix string) {
	matches, _ := filepath.Glob(filepath.Join(parent, prefix+"*"))
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() && time.Since(fi.ModTime()) > abandonedAge {
			os.RemoveAll(m)
		}
	}
}

// checkOwned refuses to replace a directory holding files the generator did
// not write: they would be lost.
func checkOwned(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot use -o %s: %v; choose a writable -o directory", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			return fmt.Errorf("-o %s holds a directory %s that the generator did not write; move it away or choose another -o", dir, name)
		}
		if name == "abi.json" {
			continue
		}
		if !IsGenerated(filepath.Join(dir, name)) {
			return fmt.Errorf("-o %s holds %s, which the generator did not write; move it away or choose another -o (the generator replaces the whole directory)", dir, name)
		}
	}
	return nil
}

// IsGenerated reports whether a Go or C file carries the generated-code
// marker in its leading comments.
func IsGenerated(path string) bool {
	if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".c") {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("package ")) || bytes.HasPrefix(line, []byte("#")) {
			return false
		}
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.HasSuffix(line, []byte(" DO NOT EDIT.")) {
			return true
		}
	}
	return false
}
