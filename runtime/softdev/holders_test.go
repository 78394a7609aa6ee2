//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/internal/netns"
)

// TestParseProcNetTCP: addresses as the kernel prints them (32-bit words
// in the host's byte order: these lines are an amd64's), ports, states
// and inodes; lines that do not parse are skipped.
func TestParseProcNetTCP(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0200007F:12B7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 51234 1 0000000000000000 100 0 0 10 0
   1: 00000000:12B7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 51235 1 0000000000000000 100 0 0 10 0
   2: 0100007F:9C40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 51236 1 0000000000000000 20 4 30 10 -1
   3: garbage
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:12B7 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 61234 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 61235 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000300007F:12B7 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 61236 1 0000000000000000 100 0 0 10 0
`
	if !littleEndian() {
		t.Skip("SKIPPED: the sample lines are a little-endian host's (this host prints its words the other way)")
	}
	var got []string
	for _, e := range append(parseProcNetTCP([]byte(tcp)), parseProcNetTCP([]byte(tcp6))...) {
		got = append(got, fmt.Sprintf("%v %02X %s", e.at, e.state, e.inode))
	}
	want := []string{"127.0.0.2:4791 0A 51234", "0.0.0.0:4791 0A 51235", "127.0.0.1:40000 01 51236",
		"[::]:4791 0A 61234", "[::1]:8080 0A 61235", "[::ffff:127.0.0.3]:4791 0A 61236"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("parsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

// TestListenersAt: this process's own listeners, found in /proc/net/tcp
// and tcp6 by the address they take and named with this process's pid;
// a listener at another address or port is not one of them.
func TestListenersAt(t *testing.T) {
	v4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	port := uint16(v4.Addr().(*net.TCPAddr).Port)
	comm, _ := os.ReadFile("/proc/self/comm")
	want := fmt.Sprintf("127.0.0.1:%d (pid %d, %s)", port, os.Getpid(), strings.TrimSpace(string(comm)))
	if got := describeListeners(listenersAt(netip.MustParseAddr("127.0.0.1"), port)); got != want {
		t.Errorf("listeners at 127.0.0.1:%d: %q, want %q", port, got, want)
	}
	if got := listenersAt(netip.MustParseAddr("127.0.0.5"), port); len(got) != 0 {
		t.Errorf("listeners at 127.0.0.5:%d: %v, want none (the one there is at 127.0.0.1)", port, got)
	}
	if got := listenersAt(netip.MustParseAddr("127.0.0.1"), port+1); len(got) != 0 && got[0].pid == os.Getpid() {
		t.Errorf("this process's listener found at port %d too: %v", port+1, got)
	}
	v6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("SKIPPED the IPv6 half: no ::1 here (%v)", err)
	}
	defer v6.Close()
	port6 := uint16(v6.Addr().(*net.TCPAddr).Port)
	if got := listenersAt(netip.MustParseAddr("::1"), port6); len(got) != 1 || got[0].pid != os.Getpid() || got[0].at.Addr() != netip.IPv6Loopback() {
		t.Errorf("listeners at [::1]:%d: %v, want this process's", port6, got)
	}
}

// TestOpenErrors: what Open says for each way sd_open fails, with the
// errno wrapped.
func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		addr string
		e    int
		want syscall.Errno
		says string
	}{
		{"", errPortEverywhere, syscall.EADDRINUSE, "port 4791 is taken at every loopback address at once"},
		{"", int(syscall.EADDRINUSE), syscall.EADDRINUSE, "every loopback address 127.0.0.2 ... 127.255.255.254 has a listener"},
		{"", int(syscall.EADDRNOTAVAIL), syscall.EADDRNOTAVAIL, "does not let a program listen at loopback address 127.0.0.2"},
		{"192.0.2.7", int(syscall.EADDRNOTAVAIL), syscall.EADDRNOTAVAIL, "Address option 192.0.2.7 is not an address of this host"},
		{"127.0.0.9", int(syscall.EADDRINUSE), syscall.EADDRINUSE, "Address option 127.0.0.9: port 4791 there is taken"},
		{"", int(syscall.EMFILE), syscall.EMFILE, "out of file descriptors"},
		{"", int(syscall.EAGAIN), syscall.EAGAIN, "cannot start the device's transport thread"},
		{"", int(syscall.ENOMEM), syscall.ENOMEM, "softdev: open: cannot allocate memory"},
	} {
		err := openErr(c.addr, "Address option", c.e)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("sd_open at %q failing with %d: %v; want %v saying %q", c.addr, c.e, err, c.want, c.says)
		}
	}
}

// TestOpenWithoutLoopbackRange: on a host whose loopback holds
// 127.0.0.1 alone (127.0.0.1/32, as some sandboxes have it), Open
// without an address says so and what to give it, instead of blaming
// an empty $VERBSEXP_SOFTDEV_ADDR; with one, it opens there.
func TestOpenWithoutLoopbackRange(t *testing.T) {
	if _, isRank := multiproc.Rank(); isRank {
		_, err := openChecked()
		if !errors.Is(err, syscall.EADDRNOTAVAIL) || !strings.Contains(err.Error(), "does not let a program listen at loopback address 127.0.0.2") {
			t.Errorf("Open: %v, want EADDRNOTAVAIL saying 127.0.0.2 cannot be had", err)
		}
		d, err := Open(Address("127.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		if a := d.Addr(); a != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("a device at %v", a)
		}
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		return
	}
	host := netns.Isolated(t)
	for _, args := range [][]string{{"addr", "del", "127.0.0.1/8", "dev", "lo"}, {"addr", "add", "127.0.0.1/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", append([]string{"-n", host.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	multiproc.Run(t, 1, multiproc.Config{Timeout: 30 * time.Second, Wrap: func(int) []string { return host.Wrap() }})
}
