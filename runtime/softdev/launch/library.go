package launch

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/internal/verbsabi"
)

// libName is the soname programs load.
const libName = "libibverbs.so.1"

// legacyGuard is the generated package's guard (internal/verbsabi): the
// launcher runs programs with a library that passes it, and refuses
// others with the same *dynlib.ABIError the package would return.
var legacyGuard = dynlib.Guard{
	Symbol:      verbsabi.LegacySymbol,
	ABI:         verbsabi.LegacyABI,
	Fix:         verbsabi.LegacyFix,
	OtherSymbol: verbsabi.RDMACoreSymbol,
	Other:       verbsabi.RDMACore,
}

// LibraryError says that no legacy libibverbs.so.1 was found: where it was
// looked for, and what to do.
type LibraryError struct {
	Looked []string // the files looked for
}

func (e *LibraryError) Error() string {
	return fmt.Sprintf("no MLNX_OFED libibverbs.so.1 found (looked for %s): install MLNX_OFED 4.9 (its legacy verbs), or give its unpacked packages: -ofed DIR (a directory holding %s, or the root the packages were unpacked into) or -ofed-debs DIR (MLNX_OFED's DEBS/MLNX_LIBS directory: unpacked into a cache for you)",
		strings.Join(e.Looked, ", "), libName)
}

// findLibrary returns the legacy libibverbs.so.1 to run programs with:
// the one in dir (a directory holding it, or a root the packages were
// unpacked into), or without dir the one the dynamic loader finds. A
// library of the other ABI is refused with a *dynlib.ABIError.
func findLibrary(dir string) (string, error) {
	var candidates []string
	if dir != "" {
		for _, sub := range []string{"", "usr/lib", "usr/lib64", "usr/lib/x86_64-linux-gnu", "lib", "lib64"} {
			candidates = append(candidates, filepath.Join(dir, sub, libName))
		}
	} else {
		candidates = loaderCandidates()
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(c)
		if err != nil {
			return "", fmt.Errorf("%s: %w", c, err)
		}
		legacy, other, err := exports(real)
		if err != nil {
			return "", fmt.Errorf("%s: not a shared library the launcher can read: %w", c, err)
		}
		if !legacy {
			return "", &dynlib.ABIError{Path: c, Guard: legacyGuard, Other: other}
		}
		return c, nil
	}
	return "", &LibraryError{Looked: candidates}
}

// loaderCandidates are where the dynamic loader looks for libibverbs.so.1,
// in its order: LD_LIBRARY_PATH, its cache (ldconfig -p), the default
// directories.
func loaderCandidates() []string {
	var c []string
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			c = append(c, filepath.Join(d, libName))
		}
	}
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == libName && strings.Contains(line, "x86-64") {
				c = append(c, f[len(f)-1])
			}
		}
	}
	for _, d := range []string{"/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"} {
		c = append(c, filepath.Join(d, libName))
	}
	return c
}

// exports says whether the library exports the legacy marker, and the
// rdma-core one.
func exports(path string) (legacy, rdmaCore bool, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return false, false, err
	}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF {
			continue
		}
		switch s.Name {
		case verbsabi.LegacySymbol:
			legacy = true
		case verbsabi.RDMACoreSymbol:
			rdmaCore = true
		}
	}
	return legacy, rdmaCore, nil
}
