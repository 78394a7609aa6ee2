package launch_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/softdev/internal/vendortest"
	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// nobody is the stranger of these tests: an unprivileged user's uid.
const nobody = 65534

// oldCacheKey is the directory name launchers before the cache was
// checked gave the packages of dir: where they trusted any .complete.
func oldCacheKey(t *testing.T, dir string) string {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	sort.Strings(debs)
	h := sha256.New()
	for _, d := range debs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(d), len(b))
		h.Write(b)
	}
	return "ofed-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// plantCache makes, as the stranger would, a cache at root whose
// ibv_devices writes the uid it runs as to marker, with the real legacy
// library beside it (so that a launcher that trusts the directory runs
// the program), and every mark of a complete cache, old and new. What
// it creates, root's missing parents included, is the stranger's; it is
// removed when the test ends.
func plantCache(t *testing.T, root, marker string) {
	t.Helper()
	top := root
	for {
		parent := filepath.Dir(top)
		if _, err := os.Lstat(parent); err == nil {
			break
		}
		top = parent
	}
	if _, err := os.Lstat(top); err == nil {
		t.Fatalf("%s exists already: the test plants only where nothing is", top)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	lib, err := os.ReadFile(filepath.Join(vendor.Root, "usr/lib/libibverbs.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"usr/bin/ibv_devices":     "#!/bin/sh\n/usr/bin/id -u > '" + marker + "'\n",
		"usr/lib/libibverbs.so.1": string(lib),
		".complete":               "",
		".manifest":               `{"Key":"` + filepath.Base(root) + `","Files":[]}`,
		"usr/bin/ibv_rc_pingpong": "#!/bin/sh\n/usr/bin/id -u > '" + marker + "'\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, nobody, nobody)
		}
		return err
	})
}

// TestPlantedCache: a cache another user planted where a launcher run by
// root looks is never used: in the old fallback under /tmp (HOME and
// XDG_CACHE_HOME unset: env -i, a systemd unit), and in a HOME another
// user owns (sudo -E). The launch works, from a cache of root's own, and
// the planted ibv_devices never runs. Before the cache was checked, the
// first ran the planted program as uid 0.
func TestPlantedCache(t *testing.T) {
	needVendor(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: planting a cache as another user and launching as root need root")
	}
	debs, err := filepath.Abs(vendortest.DebsDir())
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := launch.DebsKey(debs)
	if err != nil {
		t.Fatal(err)
	}
	strangersHome := filepath.Join(os.TempDir(), fmt.Sprintf("softdev-planted-home-%d", os.Getpid()))
	for _, tc := range []struct {
		what    string
		env     []string
		planted []string
	}{
		{"no HOME (env -i)", nil, []string{filepath.Join("/tmp/verbsexp", oldCacheKey(t, debs))}},
		{"HOME another user's (sudo -E)", []string{"HOME=" + strangersHome}, []string{
			filepath.Join(strangersHome, ".cache/verbsexp", oldCacheKey(t, debs)),
			filepath.Join(strangersHome, ".cache/verbsexp", newKey)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran-as")
			for _, root := range tc.planted {
				plantCache(t, root, marker)
			}
			// env -i: nothing of this process's environment but what the
			// case gives.
			cmd := exec.Command("env", append(append([]string{"-i"}, tc.env...),
				vendor.Softdev, "exec", "-ofed-debs", debs, "-driver", vendor.Driver, "--", "ibv_devices")...)
			out, err := cmd.CombinedOutput()
			if b, rerr := os.ReadFile(marker); rerr == nil {
				t.Fatalf("the planted ibv_devices ran, as uid %s; the launch said:\n%s", strings.TrimSpace(string(b)), out)
			}
			if err != nil || !strings.Contains(string(out), "softdev0") {
				t.Fatalf("env -i %s softdev exec -ofed-debs %s -- ibv_devices: %v\n%s\nwant it to list softdev0 from a cache of root's own", strings.Join(tc.env, " "), debs, err, out)
			}
			for _, root := range tc.planted {
				if strings.HasPrefix(root, strangersHome) && !strings.Contains(string(out), "not "+filepath.Join(strangersHome, ".cache/verbsexp")+": ") {
					t.Errorf("the launcher did not say why it passed over %s:\n%s", filepath.Dir(root), out)
				}
			}
			t.Logf("%s", out)
		})
	}
}

// TestCacheChecked: the package cache is checked against its manifest
// before every use: a file changed or added after the unpack is found,
// and the packages are unpacked again. Before, any directory with a
// .complete was trusted as it was.
func TestCacheChecked(t *testing.T) {
	needVendor(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	debs := vendortest.DebsDir()
	root, err := launch.UnpackDebs(debs)
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(root, "usr/bin/ibv_devices")
	want, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, append(append([]byte{}, want...), "\n#changed"...), 0o755); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(root, "usr/bin/ibv_extra")
	if err := os.WriteFile(extra, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	again, err := launch.UnpackDebs(debs)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(again, "usr/bin/ibv_devices")); err != nil || string(got) != string(want) {
		t.Errorf("the changed ibv_devices is still in the cache (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(again, "usr/bin/ibv_extra")); err == nil {
		t.Errorf("the added ibv_extra is still in the cache")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(root), ".unpack-*")); len(left) != 0 {
		t.Errorf("the second unpack left %v", left)
	}
	// A cache without its manifest (an unpack of an earlier launcher, a
	// directory made by hand) is not followed, nor does it stop the
	// unpack (before, a directory without .complete failed every launch:
	// rename … file exists).
	if err := os.Remove(filepath.Join(root, ".manifest")); err != nil {
		t.Fatal(err)
	}
	if again, err := launch.UnpackDebs(debs); err != nil {
		t.Errorf("a cache without its manifest: %v", err)
	} else if _, err := os.Stat(filepath.Join(again, ".manifest")); err != nil {
		t.Errorf("a cache without its manifest was used as it was: %v", err)
	}
}

// TestDebsPinned: where a SHA256SUMS beside the packages (or in their
// parent, as in the shared MLNX_OFED copy) lists them, a package that
// does not match it, or one it does not list, is refused before
// anything is unpacked.
func TestDebsPinned(t *testing.T) {
	needVendor(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	src, err := filepath.Glob(filepath.Join(vendortest.DebsDir(), "*.deb"))
	if err != nil || len(src) < 2 {
		t.Fatalf("the vendor's packages: %v %v", src, err)
	}
	top := t.TempDir()
	debs := filepath.Join(top, "debs")
	if err := os.Mkdir(debs, 0o755); err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	for _, d := range src {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(debs, filepath.Base(d)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&sums, "%x  debs/%s\n", sum, filepath.Base(d))
	}
	writeSums := func(s string) {
		if err := os.WriteFile(filepath.Join(top, "SHA256SUMS"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wrong := []byte(sums.String())
	wrong[0] ^= 1 // '0'-'9' and 'a'-'f' stay hex digits, the first package's sum another
	if wrong[0] == 'g' || wrong[0] == '`' {
		wrong[0] = '0'
	}
	for _, tc := range []struct {
		what, sums, says string
	}{
		{"a package that does not match", string(wrong), "does not match its SHA-256 in"},
		{"a package not listed", strings.Join(strings.Split(sums.String(), "\n")[1:], "\n"), "is not listed in"},
	} {
		writeSums(tc.sums)
		if _, err := launch.UnpackDebs(debs); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it refused (%q)", tc.what, err, tc.says)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "verbsexp", "ofed-*")); len(left) != 0 {
		t.Errorf("refused packages were unpacked: %v", left)
	}
}

// TestKilledUnpack: a launcher killed while it unpacks leaves its
// scratch directory (.unpack-*), which the next unpack removes; one that
// a running launcher holds (locked) is left alone. Before, they stayed
// for good (up to 4.3 MB each).
func TestKilledUnpack(t *testing.T) {
	needVendor(t)
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	base := filepath.Join(cache, "verbsexp")
	debs := vendortest.DebsDir()
	var killed []string
	for attempt := 0; len(killed) == 0; attempt++ {
		if attempt == 5 {
			t.Fatal("in 5 launches, none was caught unpacking")
		}
		cmd := exec.Command(vendor.Softdev, "exec", "-ofed-debs", debs, "-driver", vendor.Driver, "--", "/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(time.Millisecond) {
			m, _ := filepath.Glob(filepath.Join(base, ".unpack-*", "usr"))
			if len(m) > 0 {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				break
			}
		}
		cmd.Wait()
		killed, _ = filepath.Glob(filepath.Join(base, ".unpack-*"))
		os.RemoveAll(filepath.Join(base, mustKey(t, debs))) // in case it finished first
	}
	busy := filepath.Join(base, ".unpack-busy")
	if err := os.Mkdir(busy, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Open(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := launch.UnpackDebs(debs); err != nil {
		t.Fatal(err)
	}
	for _, k := range killed {
		if _, err := os.Stat(k); err == nil {
			t.Errorf("the killed launcher's %s is still there", k)
		}
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("the locked (running) unpack's directory was removed: %v", err)
	}
}

func mustKey(t *testing.T, debs string) string {
	t.Helper()
	k, err := launch.DebsKey(debs)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
