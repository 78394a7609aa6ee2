package launch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/softdev/internal/vendortest"
	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// TestReadmeExample runs the README's softdev exec example as written
// (the block after the marker, in README.md or a page of docs/; each
// distinct one), from the module's root: make softdev, then the vendor's
// RC pingpong in two processes, each on a device of its own. The
// addresses it gives (-addr) and the pingpong's port (-p, or port=) are
// replaced by free ones drawn at random, so that the test meets no other
// run of the block (a user's, another test's) at the same ones; its
// pause for the server (sleep N) waits until the server listens, however
// loaded the host. What the block leaves running when it ends is killed.
func TestReadmeExample(t *testing.T) {
	needVendor(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- softdev-exec-example -->\n```sh\n"
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	blocks := map[string]string{} // block → where
	for _, page := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(b), marker)
		if !ok {
			continue
		}
		script, _, closed := strings.Cut(rest, "```")
		if !closed {
			t.Fatalf("%s: the ```sh block after %q does not end", page, strings.TrimSpace(marker[:31]))
		}
		if _, dup := blocks[script]; !dup {
			blocks[script] = page
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("neither README.md nor docs/*.md has a ```sh block after %q", strings.TrimSpace(marker[:31]))
	}
	for block, page := range blocks {
		rel, _ := filepath.Rel(root, page)
		t.Run(rel, func(t *testing.T) { runExample(t, root, block) })
	}
}

// runExample runs one example block from root.
func runExample(t *testing.T, root, block string) {
	script, replaced := freeTheBlock(t, block)
	t.Logf("the block, with %s:\n%s", replaced, script)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OFED_DEBS="+vendortest.DebsDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second // a server left waiting holds the output open
	defer func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's example: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "1000 iters in"); n != 2 {
		t.Fatalf("the README's example: %d sides reported 1000 iterations, want 2:\n%s", n, out)
	}
}

// freeTheBlock replaces in script each device address given with -addr
// and each port given with -p or port= by a free one drawn at random,
// and says which.
func freeTheBlock(t *testing.T, script string) (string, string) {
	t.Helper()
	var said []string
	swap := func(what, old, new string) {
		script = regexp.MustCompile(`\b`+regexp.QuoteMeta(old)+`\b`).ReplaceAllString(script, new)
		said = append(said, fmt.Sprintf("%s %s for %s", what, new, old))
	}
	seen := map[string]bool{}
	subnet := 64 + rand.IntN(64) // one /16 for all: a dlid names an address in the device's own
	for _, m := range regexp.MustCompile(`-addr[ =]+(\d+\.\d+\.\d+\.\d+)\b`).FindAllStringSubmatch(script, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			swap("address", m[1], freeLoopbackAddr(t, subnet))
		}
	}
	port := 0
	for _, m := range regexp.MustCompile(`(?:-p[ =]+|\bport=)(\d+)\b`).FindAllStringSubmatch(script, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			p := freePort(t)
			if port == 0 {
				port = p
			}
			swap("port", m[1], strconv.Itoa(p))
		}
	}
	if sleep := regexp.MustCompile(`(?m)^sleep [0-9.]+$`); port != 0 && sleep.MatchString(script) {
		wait := fmt.Sprintf(`for _ in $(seq 1200); do grep -qE ':%04X [0:]+ 0A ' /proc/net/tcp /proc/net/tcp6 && break; sleep 0.05; done`, port)
		script = sleep.ReplaceAllLiteralString(script, wait)
		said = append(said, fmt.Sprintf("a wait for port %d to listen for the sleep", port))
	}
	if len(said) == 0 {
		return script, "nothing to replace"
	}
	return script, strings.Join(said, ", ")
}

// freeLoopbackAddr is an address of 127.subnet.0.0/16 no device listens
// at now, drawn at random (the test's subnets, 127.64-127.127, are ones
// no one picks by hand, nor a launcher choosing its own from 127.0.0.2),
// whose low 16 bits are a unicast LID (below 0xc000).
func freeLoopbackAddr(t *testing.T, subnet int) string {
	t.Helper()
	for range 100 {
		a := fmt.Sprintf("127.%d.%d.%d", subnet, rand.IntN(0xc0), 1+rand.IntN(254))
		l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(launch.WirePort)))
		if err == nil {
			l.Close()
			return a
		}
	}
	t.Fatal("no free loopback address in 100 draws")
	return ""
}
