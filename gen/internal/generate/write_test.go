package generate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/emit"
)

// TestWriteRemovesAbandonedScratch: a scratch directory a killed run left
// behind is removed by the next run once it is old enough; a fresh one
// (possibly a concurrent run's) is left alone.
func TestWriteRemovesAbandonedScratch(t *testing.T) {
	parent := t.TempDir()
	old := filepath.Join(parent, ".pkg.new-123")
	fresh := filepath.Join(parent, ".pkg.new-456")
	for _, d := range []string{old, fresh} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * abandonedAge)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(parent, "pkg"), []emit.File{{Name: "abi.json", Data: []byte("{}\n")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("abandoned %s still there", old)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh %s removed: %v", fresh, err)
	}
}
