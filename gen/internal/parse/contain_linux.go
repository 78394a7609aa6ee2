package parse

import (
	"os/exec"
	"syscall"
)

// dieWithParent kills the front end's child when the generator dies
// (kill -9 mid-run): it would otherwise translate on, unwanted, up to
// its CPU limit.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
