//go:build linux && cgo

package coll_test

import (
	"testing"

	"github.com/verbsexp/verbsexp/runtime/coll/internal/leakcheck"
)

// TestMain fails the run if any test or example leaves a lease Buffer
// or a task list arena allocated.
func TestMain(m *testing.M) { leakcheck.Main(m) }
