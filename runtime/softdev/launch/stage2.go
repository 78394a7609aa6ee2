package launch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// stageEnv carries the plan to the launcher's child: the executable that
// called Command, started again in a new mount namespace, which makes the
// program's files and then becomes the program (init below).
const stageEnv = "VERBSEXP_SOFTDEV_LAUNCH"

// plan is what the child makes and runs.
type plan struct {
	Scratch  string            // an empty directory: the tmpfs goes here
	Tree     map[string]string // the sysfs tree, relative to Scratch/sys
	Lib      string            // the legacy libibverbs.so.1
	Bin      string            // put first on PATH (the unpacked packages' programs), or ""
	Driver   string            // libsoftdev-rdmav2.so
	Program  string
	Args     []string
	Listener string // SOFTDEV_LISTEN_FDS for the driver
}

func init() {
	v, ok := os.LookupEnv(stageEnv)
	if !ok {
		return
	}
	os.Unsetenv(stageEnv)
	var p plan
	err := json.Unmarshal([]byte(v), &p)
	if err == nil {
		err = p.run()
	}
	fmt.Fprintf(os.Stderr, "softdev exec: %v\n", err)
	os.Exit(127)
}

// run makes the program's files in this (new) mount namespace and execs
// it; it returns only on failure.
func (p *plan) run() error {
	if p.Bin != "" {
		os.Setenv("PATH", joinPath(p.Bin, os.Getenv("PATH")))
	}
	prog, err := exec.LookPath(p.Program)
	if err != nil {
		return err
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	if err := syscall.Mount("softdev", p.Scratch, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", p.Scratch, err)
	}
	sys := filepath.Join(p.Scratch, "sys")
	for rel, content := range p.Tree {
		f := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, []byte(content), 0o444); err != nil {
			return err
		}
	}
	// /dev/infiniband/uverbs0: a file that opens for reading and writing
	// (the driver replaces the library's descriptor at once).
	if err := p.cover("/dev/infiniband", map[string]string{uverbsName: ""}); err != nil {
		return err
	}
	if err := syscall.Mount("/dev/null", "/dev/infiniband/"+uverbsName, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding /dev/null to /dev/infiniband/%s: %w", uverbsName, err)
	}
	// The driver list: softdev's alone (libibverbs adds -rdmav2.so). The
	// driver is bound into a directory beside it, at a path without
	// spaces (the driver line and LD_PRELOAD split on them; libibverbs
	// reads only the files of the list's directory, not directories).
	driver := "/etc/libibverbs.d/softdev/" + DriverFile
	if err := p.cover("/etc/libibverbs.d", map[string]string{
		"softdev.driver":        "driver " + strings.TrimSuffix(driver, "-rdmav2.so") + "\n",
		"softdev/" + DriverFile: "",
	}); err != nil {
		return err
	}
	if err := syscall.Mount(p.Driver, driver, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the driver %s to %s: %w", p.Driver, driver, err)
	}
	// Memory registration pins pages: as on an RDMA host, no small limit.
	syscall.Setrlimit(8 /* RLIMIT_MEMLOCK */, &syscall.Rlimit{Cur: ^uint64(0), Max: ^uint64(0)})

	env := append(os.Environ(),
		"SYSFS_PATH="+sys,
		"SOFTDEV_LISTEN_FDS="+p.Listener,
		"LD_LIBRARY_PATH="+joinPath(filepath.Dir(p.Lib), os.Getenv("LD_LIBRARY_PATH")),
		"LD_PRELOAD="+joinPath(driver, os.Getenv("LD_PRELOAD")))
	return syscall.Exec(prog, append([]string{p.Program}, p.Args...), env)
}

// joinPath puts first before rest in a colon-separated list.
func joinPath(first, rest string) string {
	if rest == "" {
		return first
	}
	return first + ":" + rest
}

// cover makes dir hold exactly files (paths and contents), in this
// namespace: a tmpfs directory bound over dir if it exists; if not, an
// overlay of its parent adds it (what the parent had stays, its own
// mounts bound again on top).
func (p *plan) cover(dir string, files map[string]string) error {
	tag := strings.ReplaceAll(strings.Trim(dir, "/"), "/", "-")
	src := filepath.Join(p.Scratch, "cover-"+tag)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	for name, content := range files {
		f := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		if err := syscall.Mount(src, dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s over %s: %w", src, dir, err)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	upper := filepath.Join(p.Scratch, "upper-"+tag)
	work := filepath.Join(p.Scratch, "work-"+tag)
	stash := filepath.Join(p.Scratch, "stash-"+tag)
	for _, d := range []string{upper, work, stash} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(upper, filepath.Base(dir)), 0o755); err != nil {
		return err
	}
	subs, err := submounts(parent)
	if err != nil {
		return err
	}
	// The parent as it is, its mounts included, kept aside: the overlay's
	// lower layer, and the source its mounts are bound again from.
	if err := syscall.Mount(parent, stash, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s aside: %w", parent, err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", stash, upper, work)
	if err := syscall.Mount("overlay", parent, "overlay", 0, opts); err != nil {
		return fmt.Errorf("adding %s with an overlay of %s (%s): %w", dir, parent, opts, err)
	}
	for _, m := range subs {
		rel, _ := filepath.Rel(parent, m)
		if err := syscall.Mount(filepath.Join(stash, rel), m, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s again over the overlay of %s: %w", m, parent, err)
		}
	}
	if err := syscall.Mount(src, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s over %s: %w", src, dir, err)
	}
	return nil
}

// submounts lists the mount points strictly under dir whose parents are
// not themselves under it (binding those again, recursively, brings the
// rest), from /proc/self/mountinfo.
func submounts(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			all = append(all, mp)
		}
	}
	sort.Strings(all)
	var top []string
	for _, m := range all {
		if len(top) > 0 && strings.HasPrefix(m, top[len(top)-1]+"/") {
			continue
		}
		if len(top) > 0 && m == top[len(top)-1] {
			continue
		}
		top = append(top, m)
	}
	return top, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
