package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// driverSources are the C files of runtime/softdev's engine and transport
// the driver is built from with its front end, driver/driver.c: the same
// files the Go package compiles besides its own front end (front_go.c), so
// both front ends run one engine (TestDriverSources keeps the list whole).
var driverSources = []string{
	"engine_objects.c", "engine_post.c", "engine_exec.c", "engine_dma.c",
	"transport_rc.c", "transport_link.c", "transport_wire.c", "transport_auth.c",
	"driver/driver.c",
}

// Build says how to build the driver.
type Build struct {
	// Src is runtime/softdev's directory (SourceDir finds it).
	Src string
	// OFED is the root of an MLNX_OFED install or of its unpacked
	// packages: the driver is compiled against its
	// usr/include/infiniband/{driver,verbs_exp}.h (or include/…) and
	// linked against its libibverbs.so.1, which it then needs at run
	// time (found as findLibrary finds it).
	OFED string
	// Include, if set, is the directory holding infiniband/driver.h
	// instead of OFED's (an installed MLNX_OFED's OFED_INCLUDE).
	Include string
	// Out is the file to write (DriverFile, by the launcher's
	// convention, beside the softdev command).
	Out string
	// CC is the C compiler; "" is $CC, else gcc.
	CC string
}

// SourceDir finds runtime/softdev's directory with the go command, so a
// user building from their own module gets the sources of the module
// version they require.
func SourceDir() (string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/verbsexp/verbsexp/runtime/softdev").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go list runtime/softdev: %v: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("go list runtime/softdev: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Driver builds the driver: one compiler run, written to a temporary file
// beside Out and renamed, so Out is never half-written.
func (b Build) Driver() error {
	root, rels := b.OFED, []string{"usr/include/infiniband/driver.h", "include/infiniband/driver.h", "infiniband/driver.h"}
	if b.Include != "" {
		root, rels = b.Include, []string{"infiniband/driver.h"}
	}
	include, err := firstDir(root, rels...)
	if err != nil {
		return fmt.Errorf("building the softdev driver needs MLNX_OFED's driver.h (its libibverbs-dev package): %w", err)
	}
	lib, err := findLibrary(b.OFED)
	if err != nil {
		return fmt.Errorf("building the softdev driver: %w", err)
	}
	cc := b.CC
	if cc == "" {
		cc = os.Getenv("CC")
	}
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("building the softdev driver needs a C compiler (%s): apt-get install gcc", cc)
	}
	if err := os.MkdirAll(filepath.Dir(b.Out), 0o755); err != nil {
		return err
	}
	tmp := b.Out + ".tmp"
	args := []string{"-std=gnu11", "-O2", "-g", "-Wall", "-fPIC", "-shared",
		// As the Go package's: a call into a layer whose header the
		// file does not include is an error (runtime/softdev's doc).
		"-Werror=implicit-function-declaration",
		// Only write(2) is exported (driver.c): the engine's own symbols
		// must bind to this object's copies, even in a program that links
		// the in-process engine too.
		"-fvisibility=hidden", "-Wl,-Bsymbolic", "-Wl,--no-undefined",
		"-I" + include, "-o", tmp}
	for _, s := range driverSources {
		args = append(args, filepath.Join(b.Src, s))
	}
	args = append(args, lib, "-Wl,-rpath-link,"+filepath.Dir(lib), "-lpthread", "-ldl")
	cmd := exec.Command(cc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("building the softdev driver: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return os.Rename(tmp, b.Out)
}

// firstDir returns the include directory of the first of rels (paths of
// driver.h) under root that exists.
func firstDir(root string, rels ...string) (string, error) {
	if root == "" {
		root = "/"
	}
	var looked []string
	for _, r := range rels {
		p := filepath.Join(root, r)
		if _, err := os.Stat(p); err == nil {
			return filepath.Dir(filepath.Dir(p)), nil
		}
		looked = append(looked, p)
	}
	return "", fmt.Errorf("none of %s exists", strings.Join(looked, ", "))
}
