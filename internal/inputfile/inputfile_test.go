package inputfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRead: a regular file within the bound is read whole; a FIFO, a
// device, a link to a device and a directory are refused without
// blocking; a file beyond the bound is refused by its size.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(plain, 10, "why"); err != nil || string(b) != "0123456789" {
		t.Fatalf("Read(plain, 10) = %q, %v", b, err)
	}
	if _, err := Read(plain, 9, "the bound says so"); !errors.Is(err, ErrTooLarge) || err.Error() != plain+" is larger than 9 bytes: the bound says so" {
		t.Errorf("Read(plain, 9): %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{fifo: "a named pipe (FIFO)", "/dev/zero": "a character device", link: "a character device", dir: "a directory"} {
		_, err := Read(path, 1<<20, "why")
		if !errors.Is(err, ErrNotRegular) || !strings.HasPrefix(err.Error(), path+" is "+kind+", not a regular file") {
			t.Errorf("Read(%s): %v", path, err)
		}
	}
	if Size(4<<20) != "4 MiB" || Size(512<<10) != "512 KiB" || Size(100) != "100 bytes" {
		t.Errorf("Size: %s %s %s", Size(4<<20), Size(512<<10), Size(100))
	}
}
