package launch_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/softdev/internal/vendortest"
)

// TestReadmeExample runs the README's softdev exec example as written,
// from the module's root: make softdev, then the vendor's RC pingpong in
// two processes, each on a device of its own.
func TestReadmeExample(t *testing.T) {
	needVendor(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- softdev-exec-example -->\n```sh\n"
	_, rest, ok := strings.Cut(string(b), marker)
	script, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatalf("README.md has no ```sh block after %q", strings.TrimSpace(marker[:31]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OFED_DEBS="+vendortest.DebsDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's example: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "1000 iters in"); n != 2 {
		t.Fatalf("the README's example: %d sides reported 1000 iterations, want 2:\n%s", n, out)
	}
}
