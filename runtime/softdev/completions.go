//go:build linux && cgo

package softdev

/*
#include "engine.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// JitterEnv names the environment variable Open reads for
// CompletionJitter's bound when no CompletionJitter option is given
// (a Go duration: "50us", "1ms"; "0" or empty: none). The libibverbs
// driver reads it too, so `softdev exec` runs a vendor program with
// jitter: VERBSEXP_SOFTDEV_JITTER=50us softdev exec ./prog.
const JitterEnv = "VERBSEXP_SOFTDEV_JITTER"

// MaxJitter is the largest CompletionJitter bound Open takes.
const MaxJitter = time.Second

type completionConfig struct {
	sync      bool
	jitter    time.Duration
	jitterSet bool
}

// SyncCompletions makes a completion visible to polls as soon as the
// device produces it, as softdev did before completions became
// asynchronous: a poll returns the completions of the work it ran
// itself, so a test that posts and polls once sees them, step by step,
// the same every run. An HCA does not: use it for tests of softdev's
// own rules, not to make a program pass.
//
// Without it a loopback completion is written to its CQ about a
// microsecond after the device produced it, never in the poll whose run
// produced it (see the package doc, Completions as an HCA's).
// CompletionJitter overrides it.
func SyncCompletions() DeviceOption { return func(c *deviceConfig) { c.comp.sync = true } }

// CompletionJitter delays each completion by a random time up to max
// on top of the device's latency, to expose programs that assume an
// order or a timing between QPs that the verbs do not promise (that a
// SEND's receive completes before the send, that QP A's completion on a
// shared CQ comes before QP B's because A was posted first). What the
// verbs promise still holds: one QP's send completions, and its receive
// completions, come in order; CQE_WAIT counts what the CQ has been
// written; a completion event fires once the CQE is there. 0 turns it
// off; at most MaxJitter. Without it, Open reads $VERBSEXP_SOFTDEV_JITTER
// (JitterEnv).
func CompletionJitter(max time.Duration) DeviceOption {
	return func(c *deviceConfig) { c.comp.jitter, c.comp.jitterSet = max, true }
}

// parseJitter reads a jitter bound: a Go duration, or "0" or "" for
// none.
func parseJitter(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// apply sets the C config's completion fields: EINVAL for a jitter
// bound outside 0..MaxJitter, from the option or the environment.
func (c completionConfig) apply(out *C.struct_sd_config) error {
	jitter, where := c.jitter, "CompletionJitter"
	if !c.jitterSet && !c.sync { // SyncCompletions asked for determinism: the environment does not undo it
		env := os.Getenv(JitterEnv)
		j, err := parseJitter(env)
		if err != nil {
			return fmt.Errorf("softdev: open: $%s=%q: want a duration such as 50us, or 0: %w", JitterEnv, env, syscall.EINVAL)
		}
		jitter, where = j, "$"+JitterEnv
	}
	if jitter < 0 || jitter > MaxJitter {
		return fmt.Errorf("softdev: open: %s %v: want 0 to %v: %w", where, jitter, MaxJitter, syscall.EINVAL)
	}
	if c.sync {
		out.sync_completions = 1
	}
	out.jitter_ns = C.uint64_t(jitter.Nanoseconds())
	return nil
}
