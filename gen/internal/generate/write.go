package generate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/emit"
	"github.com/verbsexp/verbsexp/internal/inputfile"

	"github.com/verbsexp/verbsexp/internal/scratch"
)

// Write replaces dir with exactly files, atomically: everything is written
// to a sibling scratch directory first and swapped in (one
// renameat2(RENAME_EXCHANGE) on Linux, else renames), so a failed or
// killed run leaves the previous package as it was. dir must be absent,
// empty, or hold only files this generator wrote (Owned); a symbolic link
// is followed (the package it points to is replaced, the link stays). The
// new directory keeps the previous one's permissions. The scratch
// directories killed runs left for dir are removed first
// (removeAbandoned).
func Write(dir string, files []emit.File) error {
	dir, err := outputDir(dir)
	if err != nil {
		return err
	}
	mode := fs.FileMode(0o755)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("-o %s is not a directory; choose a writable -o directory", dir)
		}
		mode = fi.Mode().Perm()
	}
	if err := checkOwned(dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		if errors.Is(err, syscall.EROFS) {
			return fmt.Errorf("cannot create %s: it is on a read-only file system; choose another -o", parent)
		}
		return fmt.Errorf("cannot create %s: %v; choose a writable -o directory", parent, err)
	}
	removeAbandoned(parent, dir)
	tmp, release, err := scratch.Make(parent, scratchPrefix(dir))
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("cannot write %s: %s is on a read-only file system (the package is written next to it and swapped in); choose another -o", dir, parent)
	case err != nil:
		return fmt.Errorf("cannot write next to %s: %v; check the permissions of %s or choose another -o", dir, err, parent)
	}
	defer release()
	defer scratch.RemoveAll(tmp)
	for _, f := range files {
		p := filepath.Join(tmp, f.Name)
		var err error
		if f.Link != "" {
			err = os.Symlink(f.Link, p)
		} else {
			err = os.WriteFile(p, f.Data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %v (nothing in %s was changed)", f.Name, err, dir)
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	existed := false
	if _, err := os.Stat(dir); err == nil {
		existed = true
		// One atomic swap where the kernel can: the previous package is
		// then in tmp, removed by the deferred scratch.RemoveAll.
		if exchange(tmp, dir) == nil {
			return nil
		}
	}
	// No exchange: two renames, with a moment in which dir is absent and
	// the previous package sits in tmp.old.
	old := ""
	if existed {
		old = tmp + ".old"
		// Locked before it is renamed (the lock goes with it), so that
		// no other run takes it for abandoned while it is set aside.
		if lock, _, err := scratch.Lock(dir, false); err == nil {
			defer lock.Close()
		}
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("cannot replace %s: %v (nothing was changed)", dir, err)
		}
	}
	if beforeRename != nil {
		beforeRename()
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			if os.Rename(old, dir) == nil {
				return fmt.Errorf("cannot move the new package into %s: %v (the previous one was kept)", dir, err)
			}
			return fmt.Errorf("cannot move the new package into %s: %v; the previous one is in %s", dir, err, old)
		}
		return fmt.Errorf("cannot move the new package into %s: %v (it did not exist when this run started: another run may have created it meanwhile; nothing of this run was kept, run it again)", dir, err)
	}
	if old != "" {
		scratch.RemoveAll(old)
	}
	return nil
}

// Current reports whether dir already holds exactly files, byte for
// byte (links by their targets), and nothing else the generator wrote.
func Current(dir string, files []emit.File) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := map[string]emit.File{}
	for _, f := range files {
		want[f.Name] = f
	}
	seen := 0
	for _, e := range entries {
		f, ok := want[e.Name()]
		if !ok {
			if emit.OutputName(e.Name()) {
				return false // one the generator wrote once and would remove
			}
			continue
		}
		if !SameFile(filepath.Join(dir, e.Name()), f) {
			return false
		}
		seen++
	}
	return seen == len(files)
}

// SameFile reports whether path holds f: the same bytes in a regular
// file, or a symbolic link to the same target.
func SameFile(path string, f emit.File) bool {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return false
	case f.Link != "":
		target, err := os.Readlink(path)
		return err == nil && fi.Mode()&fs.ModeSymlink != 0 && target == f.Link
	case !fi.Mode().IsRegular():
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && bytes.Equal(b, f.Data)
}

// beforeRename runs between the checks and the final rename of the
// fallback path, in tests (to lose a race on purpose).
var beforeRename func()

// outputDir makes -o absolute and follows symbolic links to the package
// they name.
func outputDir(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(dir)
	switch {
	case err == nil:
		return real, nil
	case errors.Is(err, fs.ErrNotExist):
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(dir)
			return "", fmt.Errorf("-o %s is a symbolic link to %s, which does not exist; create it, or choose another -o", dir, target)
		}
		return dir, nil // a new package (its parent may be a link: it is followed when created)
	}
	return "", fmt.Errorf("cannot use -o %s: %v; choose a writable -o directory", dir, err)
}

// Scratch directories are named .verbsexp-gen.<hash of the package's
// path>.new-<random> (and .old, on file systems without
// RENAME_EXCHANGE): the prefix is the generator's and the hash ties them
// to one output directory, so no glob of a user's path ever selects them.
const scratchMark = ".verbsexp-gen."

func scratchPrefix(dir string) string {
	h := sha256.Sum256([]byte(dir))
	return scratchMark + hex.EncodeToString(h[:6]) + ".new-"
}

// abandonedAge is how old a scratch directory must be before a later run
// treats it as left behind by a killed run, where the file system cannot
// lock directories (a locked one is a running generator's at any age,
// an unlocked one a killed run's).
const abandonedAge = 10 * time.Minute

// removeAbandoned deletes the scratch directories that killed runs for
// dir left in parent: named by scratchPrefix(dir) (compared as a string,
// never as a pattern), not locked by a running generator (or, where
// directories cannot be locked, older than abandonedAge), and holding
// only files the generator writes.
func removeAbandoned(parent, dir string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	prefix := scratchPrefix(dir)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		lock, busy, err := scratch.Lock(p, false)
		switch {
		case busy:
			continue // a running generator's
		case err != nil && time.Since(fi.ModTime()) <= abandonedAge:
			continue
		}
		if checkOwned(p) == nil {
			scratch.RemoveAll(p)
		}
		if lock != nil {
			lock.Close()
		}
	}
}

// checkOwned refuses to replace a directory holding anything the
// generator did not write: it would be lost.
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
		if !Owned(filepath.Join(dir, name)) {
			return fmt.Errorf("-o %s holds %s, which the generator did not write; move it away or choose another -o (the generator replaces the whole directory)", dir, name)
		}
	}
	return nil
}

// Owned reports whether the file at path is one this generator wrote: a
// name it writes (emit.OutputName), a regular file, and its own marker:
// the generated-code line of emit.Marker in a Go or C file's leading
// comments (another tool's "Code generated … DO NOT EDIT." is not
// enough), "generator": "verbsexp/gen" in abi.json; or a symbolic link
// named as its header links are (emit.LinkName), which holds nothing
// to lose.
func Owned(path string) bool {
	name := filepath.Base(path)
	if !emit.OutputName(name) {
		return false
	}
	fi, err := os.Lstat(path)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return emit.LinkName(name)
	}
	if err != nil || !fi.Mode().IsRegular() || emit.LinkName(name) {
		return false
	}
	f, _, err := inputfile.Open(path) // swapped for a FIFO since the Lstat: refused, not read
	if err != nil {
		return false
	}
	defer f.Close()
	if name == "abi.json" {
		return manifestGenerator(f) == emit.Generator
	}
	// The marker is on the second line: the file's start decides.
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("package ")) || bytes.HasPrefix(line, []byte("#")) {
			return false
		}
		if string(line) == "// "+emit.Marker {
			return true
		}
	}
	return false
}

// manifestGenerator returns the "generator" member of the JSON object r
// holds (near its start in abi.json), or "".
func manifestGenerator(r io.Reader) string {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return ""
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		if k == "generator" {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return ""
			}
			return s
		}
	}
	return ""
}
