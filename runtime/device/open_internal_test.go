//go:build linux && cgo

package device

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestSoftdevNotLinked: a program that does not link runtime/softdev and
// asks for it (by name or $VERBSEXP_DEVICE) is told what to import. The
// test binary links it (the external tests import it), so the test hides
// its registration.
func TestSoftdevNotLinked(t *testing.T) {
	openers.Lock()
	saved := openers.m
	openers.m = nil
	openers.Unlock()
	defer func() {
		openers.Lock()
		openers.m = saved
		openers.Unlock()
	}()
	t.Setenv(Env, SoftdevName)
	for _, name := range []string{SoftdevName, ""} {
		_, err := Open(name)
		if !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), `import _ "github.com/verbsexp/verbsexp/runtime/softdev"`) {
			t.Errorf("Open(%q) without softdev linked: %v; want ENODEV saying what to import", name, err)
		}
	}
}
