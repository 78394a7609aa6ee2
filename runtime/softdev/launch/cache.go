package launch

import (
	"bufio"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/verbsexp/verbsexp/internal/scratch"
)

// The package cache. `softdev exec` runs as root the programs it unpacks
// and loads their library, so the cache is a directory only root or the
// invoking user can write: every component of its path owned by one of
// them and writable by nobody else (a sticky directory such as /tmp may
// only be passed through), never a directory someone else made. What is
// unpacked is checked against the packages' own md5sums, recorded with
// the SHA-256 of every file (.manifest) and checked against that record
// before every use. The packages themselves are checked against a
// SHA256SUMS beside them or in their parent (MLNX_OFED's shared copy has
// one), when it lists them.

// cacheFormat is hashed into the cache's key: a cache of an earlier
// layout (one without a manifest) is another directory, never trusted.
const cacheFormat = "verbsexp unpacked packages v2\n"

// manifestName is the record of an unpack, written last: a cache
// directory without it is not complete.
const manifestName = ".manifest"

// unpackPrefix names the directories packages are unpacked into before
// they are renamed into place: a launcher killed meanwhile leaves one,
// which the next sweeps (sweepUnpacks).
const unpackPrefix = ".unpack-"

// manifest is what an unpack wrote, by path relative to the cache root.
type manifest struct {
	Key   string  // the cache's key: the packages it was unpacked from
	Files []entry // every entry but the manifest, sorted by Path
}

type entry struct {
	Path   string      // slash-separated, relative to the root
	Kind   string      // "dir", "file" or "link"
	Mode   fs.FileMode `json:",omitempty"` // permission bits (dir, file)
	SHA256 string      `json:",omitempty"` // file
	Target string      `json:",omitempty"` // link
}

// UnpackDebs unpacks the .deb packages of dir (MLNX_OFED's DEBS/MLNX_LIBS,
// or ../shared/ofed-4.9/debs) with dpkg-deb into a cache directory keyed
// by their contents, once, and returns the root they were unpacked into:
// nothing is installed on the system. The cache is under
// $XDG_CACHE_HOME, ~/.cache (HOME, else the user's home in the password
// database) or, if none of those is safe, /var/cache for root and
// $TMPDIR/verbsexp-UID for others; one that is not safe (see above) is
// passed over, saying why on stderr. A cache that does not match its
// manifest is unpacked again.
func UnpackDebs(dir string) (string, error) {
	key, debs, err := debsKey(dir)
	if err != nil {
		return "", err
	}
	base, err := cacheBase()
	if err != nil {
		return "", err
	}
	sweepUnpacks(base)
	root := filepath.Join(base, key)
	switch err := verifyCache(root, key); {
	case err == nil:
		return root, nil
	case !errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(os.Stderr, "softdev: %v: unpacking the packages again\n", err)
		setAside(base, root)
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		return "", errors.New("unpacking .deb packages needs dpkg-deb (apt-get install dpkg)")
	}
	tmp, release, err := scratch.Make(base, unpackPrefix)
	if err != nil {
		return "", fmt.Errorf("unpacking the packages into %s: %w", base, err)
	}
	defer release()
	defer scratch.RemoveAll(tmp) // a no-op once renamed into place
	if err := unpackInto(tmp, key, debs); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, root); err != nil {
		if verifyCache(root, key) == nil {
			return root, nil // another launcher unpacked them meanwhile
		}
		return "", err
	}
	return root, nil
}

// debsKey returns the cache's key for the packages of dir, and them:
// a digest of their names and contents. They are checked (their
// directory, as root, and the SHA256SUMS that pins them) first.
func debsKey(dir string) (string, []string, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("%s does not exist: %s", dir, GetDebs)
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil || len(debs) == 0 {
		return "", nil, fmt.Errorf("%s exists but holds no .deb packages: %s", dir, GetDebs)
	}
	sort.Strings(debs)
	if os.Geteuid() == 0 {
		for _, p := range append([]string{dir}, debs...) {
			if err := checkNotShared(p, "the packages"); err != nil {
				return "", nil, err
			}
		}
	}
	sums, err := readSums(dir, debs)
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	io.WriteString(h, cacheFormat)
	for _, d := range debs {
		b, err := os.ReadFile(d)
		if err != nil {
			return "", nil, err
		}
		if sums != nil {
			sum := sha256.Sum256(b)
			want, listed := sums.want[d]
			switch {
			case !listed:
				return "", nil, fmt.Errorf("%s is not listed in %s, which pins the other packages there: remove it, or add its SHA-256", d, sums.file)
			case want != hex.EncodeToString(sum[:]):
				return "", nil, fmt.Errorf("%s does not match its SHA-256 in %s (a damaged or replaced package): fetch it again", d, sums.file)
			}
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(d), len(b))
		h.Write(b)
	}
	return "ofed-" + hex.EncodeToString(h.Sum(nil))[:16], debs, nil
}

// unpackInto extracts debs into dir (this launcher's, locked), checks
// every file against its package's md5sums, takes every write permission
// but the owner's away (and set-id bits), and writes the manifest.
func unpackInto(dir, key string, debs []string) error {
	for _, d := range debs {
		cmd := exec.Command("dpkg-deb", "-x", d, dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %v: %s", d, err, out)
		}
		if err := checkMD5sums(d, dir); err != nil {
			return err
		}
	}
	euid, egid := os.Geteuid(), os.Getegid()
	m := manifest{Key: key}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != euid && st.Uid != 0 {
			if err := os.Lchown(p, euid, egid); err != nil {
				return err
			}
		}
		e := entry{Path: filepath.ToSlash(rel)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) || !filepath.IsLocal(filepath.Join(filepath.Dir(rel), target)) {
				return fmt.Errorf("the packages hold %s, a link to %s, outside the directory they are unpacked into: refused", rel, target)
			}
			e.Kind, e.Target = "link", target
		case fi.IsDir() || fi.Mode().IsRegular():
			mode := fi.Mode().Perm() &^ 0o022
			if err := os.Chmod(p, mode); err != nil { // also clears setuid, setgid and sticky
				return err
			}
			e.Kind, e.Mode = "dir", mode
			if fi.Mode().IsRegular() {
				sum, err := fileSHA256(p)
				if err != nil {
					return err
				}
				e.Kind, e.SHA256 = "file", sum
			}
		default:
			return fmt.Errorf("the packages hold %s, neither a file, a directory nor a link (%v): refused", rel, fi.Mode())
		}
		if rel != "." {
			m.Files = append(m.Files, e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("unpacking the packages: %w", err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, manifestName), b, 0o644); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// checkMD5sums compares what dpkg-deb unpacked from deb into dir with
// the package's own md5sums (its control member), when it has one.
func checkMD5sums(deb, dir string) error {
	out, err := exec.Command("dpkg-deb", "-I", deb, "md5sums").Output()
	if err != nil {
		return nil // no md5sums in this package: the manifest alone records it
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("%s lists %s in its md5sums, which dpkg-deb did not unpack: %w", deb, name, err)
		}
		h := md5.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		if hex.EncodeToString(h.Sum(nil)) != strings.ToLower(sum) {
			return fmt.Errorf("%s as unpacked from %s does not match the package's md5sums: a damaged package?", name, deb)
		}
	}
	return nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verifyCache checks the cache at root against its manifest: the
// directory and every entry owned by root or this user and writable by
// nobody else, the entries exactly those recorded, every file's SHA-256
// the one recorded. An error wrapping fs.ErrNotExist: there is no cache.
func verifyCache(root, key string) error {
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	if err := private(root, fi, true); err != nil {
		return fmt.Errorf("the package cache %s: %v", root, err)
	}
	mp := filepath.Join(root, manifestName)
	mfi, err := os.Lstat(mp)
	if err == nil {
		err = private(mp, mfi, false)
	}
	if err != nil {
		return fmt.Errorf("the package cache %s is incomplete or not this launcher's (%v)", root, err)
	}
	b, err := os.ReadFile(mp)
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Key != filepath.Base(root) || m.Key != key {
		return fmt.Errorf("the package cache %s has a manifest that is not its own", root)
	}
	want := make(map[string]entry, len(m.Files))
	for _, e := range m.Files {
		want[e.Path] = e
	}
	seen := 0
	err = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root || p == mp {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		e, ok := want[rel]
		if !ok {
			return fmt.Errorf("%s is not one of the unpacked files", rel)
		}
		seen++
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if err := private(rel, fi, e.Kind == "dir"); err != nil && e.Kind != "link" {
			return err
		}
		switch e.Kind {
		case "link":
			target, err := os.Readlink(p)
			if err != nil || target != e.Target {
				return fmt.Errorf("%s is not the link unpacked", rel)
			}
		case "dir", "file":
			if fi.Mode()&(fs.ModeType|fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != e.Mode|kindMode(e.Kind) {
				return fmt.Errorf("%s is not the %s unpacked (mode %v)", rel, e.Kind, fi.Mode())
			}
			if e.Kind == "file" {
				sum, err := fileSHA256(p)
				if err != nil {
					return err
				}
				if sum != e.SHA256 {
					return fmt.Errorf("%s has changed since it was unpacked", rel)
				}
			}
		}
		return nil
	})
	if err == nil && seen != len(want) {
		err = fmt.Errorf("%d of the %d unpacked entries are missing", len(want)-seen, len(want))
	}
	if err != nil {
		return fmt.Errorf("the package cache %s does not match its manifest: %v", root, err)
	}
	return nil
}

func kindMode(kind string) fs.FileMode {
	if kind == "dir" {
		return fs.ModeDir
	}
	return 0
}

// private checks one file or directory of the cache (fi, its Lstat):
// owned by root or this user, not a link, and writable by nobody else.
func private(name string, fi fs.FileInfo, dir bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return fmt.Errorf("%s: no owner known", name)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link", name)
	case dir != fi.IsDir():
		return fmt.Errorf("%s is not a %s", name, map[bool]string{true: "directory", false: "file"}[dir])
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, neither root nor this user (uid %d)", name, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %v)", name, fi.Mode().Perm())
	}
	return nil
}

// cacheBase returns the first safe directory of the candidates (see
// UnpackDebs), made if need be, with every symbolic link of its path
// resolved; those passed over are named on stderr.
func cacheBase() (string, error) {
	var candidates []string
	if x := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		candidates = append(candidates, filepath.Join(x, "verbsexp"))
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		candidates = append(candidates, filepath.Join(h, ".cache", "verbsexp"))
	}
	euid := os.Geteuid()
	if u, err := user.LookupId(strconv.Itoa(euid)); err == nil && filepath.IsAbs(u.HomeDir) && u.HomeDir != "/" {
		candidates = append(candidates, filepath.Join(u.HomeDir, ".cache", "verbsexp"))
	}
	if euid == 0 {
		candidates = append(candidates, "/var/cache/verbsexp")
	} else {
		candidates = append(candidates, filepath.Join(os.TempDir(), fmt.Sprintf("verbsexp-%d", euid)))
	}
	var passed []string
	tried := map[string]bool{}
	for _, c := range candidates {
		if tried[c] {
			continue
		}
		tried[c] = true
		dir, err := privateDir(c)
		if err != nil {
			passed = append(passed, fmt.Sprintf("not %s: %v", c, err))
			continue
		}
		if len(passed) > 0 {
			fmt.Fprintf(os.Stderr, "softdev: the package cache is %s (%s)\n", dir, strings.Join(passed, "; "))
		}
		return dir, nil
	}
	return "", fmt.Errorf("no safe directory to unpack the packages into (%s): set XDG_CACHE_HOME to a directory only you (or root) can write", strings.Join(passed, "; "))
}

// privateDir makes dir if need be and checks it is safe: every directory
// from / down owned by root or this user and writable by no one else
// (but for sticky ones above dir itself, such as /tmp), none a link.
// Links in the part of the path that exists are resolved first, and the
// resolved path is returned.
func privateDir(dir string) (string, error) {
	dir = filepath.Clean(dir)
	existing, rest := dir, []string{}
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return "", fmt.Errorf("no part of %s exists", dir)
		}
		rest = append([]string{filepath.Base(existing)}, rest...)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", err
	}
	parts := append(strings.Split(strings.TrimPrefix(real, "/"), "/"), rest...)
	if real == "/" {
		parts = rest
	}
	cur := "/"
	if err := safeDir(cur, len(parts) == 0); err != nil {
		return "", err
	}
	for i, p := range parts {
		cur = filepath.Join(cur, p)
		last := i == len(parts)-1
		if i >= len(parts)-len(rest) {
			// Made here: a directory someone else made first (in a
			// sticky parent) fails the check below.
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", err
			}
		}
		if err := safeDir(cur, last); err != nil {
			return "", err
		}
	}
	return cur, nil
}

// safeDir checks one directory of privateDir's path; a sticky one may be
// passed through (its entries can only be renamed by their owners).
func safeDir(p string, last bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s became a symbolic link", p)
	case !fi.IsDir() || !ok:
		return fmt.Errorf("%s is not a directory", p)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by another user (uid %d): it could replace what is unpacked there", p, st.Uid)
	case fi.Mode().Perm()&0o022 != 0 && (last || fi.Mode()&fs.ModeSticky == 0):
		return fmt.Errorf("%s is writable by others (mode %v): they could replace what is unpacked there", p, fi.Mode()&(fs.ModePerm|fs.ModeSticky))
	}
	return nil
}

// checkNotShared refuses a file or directory whose path has a component
// every user may write to (but for sticky directories above it): what
// is there would run as root. what names it in the message.
func checkNotShared(p, what string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	for cur, last := real, true; ; last = false {
		fi, err := os.Lstat(cur)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o002 != 0 && (last || fi.Mode()&fs.ModeSticky == 0) {
			return fmt.Errorf("%s: %s is writable by every user (mode %v), and softdev exec runs what is there as root: chmod o-w it, or use a copy in a directory only root can write",
				what, cur, fi.Mode()&(fs.ModePerm|fs.ModeSticky))
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return nil
		}
		cur = parent
	}
}

// sums is a SHA256SUMS that pins the packages: sha256sum's output, paths
// relative to its directory.
type sums struct {
	file string
	want map[string]string // by the package's path, as globbed
}

// readSums finds a SHA256SUMS in dir or its parent that lists at least
// one of debs; nil if there is none.
func readSums(dir string, debs []string) (*sums, error) {
	for _, f := range []string{filepath.Join(dir, "SHA256SUMS"), filepath.Join(dir, "..", "SHA256SUMS")} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := &sums{file: f, want: map[string]string{}}
		listed := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			sum, name, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			name = strings.TrimPrefix(strings.TrimLeft(name, " "), "*")
			listed[filepath.Join(filepath.Dir(f), filepath.FromSlash(name))] = strings.ToLower(sum)
		}
		for _, d := range debs {
			if sum, ok := listed[filepath.Clean(d)]; ok {
				s.want[d] = sum
			}
		}
		if len(s.want) > 0 {
			return s, nil
		}
	}
	return nil, nil
}

// sweepUnpacks removes the unpack directories of launchers that were
// killed while unpacking (and caches set aside): those in base whose
// lock nobody holds.
func sweepUnpacks(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), unpackPrefix) {
			continue
		}
		p := filepath.Join(base, e.Name())
		lock, busy, err := scratch.Lock(p, false)
		if busy || err != nil {
			continue // an unpack in progress
		}
		scratch.RemoveAll(p)
		lock.Close()
	}
}

// setAside moves a cache that failed its check out of the way (into an
// unpack directory, which the sweep removes) and removes it.
func setAside(base, root string) {
	dir, release, err := scratch.Make(base, unpackPrefix)
	if err != nil {
		return
	}
	defer release()
	if os.Rename(root, filepath.Join(dir, "old")) == nil {
		scratch.RemoveAll(dir)
	}
}
