//go:build !unix

package parse

import "os/exec"

func killGroup(cmd *exec.Cmd) {}
