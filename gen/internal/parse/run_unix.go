//go:build unix

package parse

import (
	"os/exec"
	"syscall"
)

// killGroup starts cmd in a process group of its own and makes its
// cancellation kill the group, children included.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
