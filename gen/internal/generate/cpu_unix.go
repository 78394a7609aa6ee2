//go:build unix

package generate

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) of this process and of
// the children it waited for: the compilers and the front end's child.
func processCPU() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	t := func(v syscall.Timeval) time.Duration { return time.Duration(v.Nano()) }
	return t(self.Utime) + t(self.Stime) + t(children.Utime) + t(children.Stime)
}
