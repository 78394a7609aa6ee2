package parse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// runTool runs name with args as runBounded does (LC_ALL=C, empty stdin,
// compilerTimeout with its process group killed, compilerOutputLimit
// bytes kept), but keeps stdout and stderr apart: the compiler probe
// reads the predefined macros from one and the search lists from the
// other.
func runTool(name string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), compilerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, errOut := &boundedBuffer{max: compilerOutputLimit}, &boundedBuffer{max: compilerOutputLimit}
	cmd.Stdout, cmd.Stderr = out, errOut
	killGroup(cmd)
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("did not finish within %v and was killed", compilerTimeout)
	}
	return out.Bytes(), errOut.Bytes(), err
}
