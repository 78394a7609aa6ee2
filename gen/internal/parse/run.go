package parse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// CompilerTimeout bounds every run of a target's C compiler: a compiler
// that hangs (a wrapper script waiting for input, a header that is a
// FIFO) must end in an error, not hang the generator. The real runs take
// milliseconds.
var CompilerTimeout = 2 * time.Minute

// runTool runs name with args, its locale set to C (plain ASCII quotes in
// messages), stdin empty, and returns stdout and stderr. It kills the
// whole process group (the gcc driver and the cc1 it started) when
// CompilerTimeout expires, and then says so.
func runTool(name string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), CompilerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	killGroup(cmd)
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("did not finish within %v and was killed", CompilerTimeout)
	}
	return out.Bytes(), errOut.Bytes(), err
}
