//go:build !linux

package parse

import "os/exec"

// dieWithParent: only Linux can tie a child's life to its parent's; the
// child's CPU limit bounds an orphan elsewhere.
func dieWithParent(*exec.Cmd) {}
