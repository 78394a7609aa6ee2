//go:build unix

package parse

import (
	"os/exec"
	"syscall"
)

// killGroup makes the command the leader of its own process group and
// its cancellation kill the whole group (the compiler driver's cc1 too).
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
