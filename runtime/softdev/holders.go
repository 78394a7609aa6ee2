//go:build linux && cgo

package softdev

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listener is a TCP socket listening on this host (in this network
// namespace), as /proc/net/tcp and tcp6 list it, and the process that
// holds it when that can be found.
type listener struct {
	at   netip.AddrPort
	pid  int    // 0: not found (another user's process, without root)
	comm string // the program's name
}

func (l listener) String() string {
	at := l.at.String()
	if l.at.Addr().Is4In6() || l.at.Addr().Is4() {
		at = netip.AddrPortFrom(l.at.Addr().Unmap(), l.at.Port()).String()
	}
	if l.pid == 0 {
		return at
	}
	return fmt.Sprintf("%s (pid %d, %s)", at, l.pid, l.comm)
}

// listenersAt returns the listeners on port whose address takes ip's:
// ip itself, or a wildcard (0.0.0.0 for an IPv4 ip; [::] for both, as
// an IPv4 connection reaches a [::] that is not IPv6-only). What cannot
// be read is left out: this only makes an error say more.
func listenersAt(ip netip.Addr, port uint16) []listener {
	ip = ip.Unmap()
	var found []listener
	inodes := map[string]int{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, e := range parseProcNetTCP(b) {
			a := e.at.Addr()
			wild := a.IsUnspecified() && (a.Is6() || ip.Is4())
			if e.at.Port() != port || e.state != tcpListen || !(wild || a.Unmap() == ip) {
				continue
			}
			inodes[e.inode] = len(found)
			found = append(found, listener{at: e.at})
		}
	}
	if len(found) > 0 {
		findHolders(found, inodes)
	}
	return found
}

// tcpListen is TCP_LISTEN in /proc/net/tcp's st column.
const tcpListen = 0x0A

type procTCP struct {
	at, peer netip.AddrPort // local and remote
	state    int
	inode    string
}

// parseProcNetTCP reads the local and remote address, state and inode of
// each socket /proc/net/tcp or tcp6 lists.
func parseProcNetTCP(b []byte) []procTCP {
	var out []procTCP
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan() // the heading
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		at, ok1 := procAddr(f[1])
		peer, ok2 := procAddr(f[2])
		st, err := strconv.ParseUint(f[3], 16, 8)
		if !ok1 || !ok2 || err != nil {
			continue
		}
		out = append(out, procTCP{at: at, peer: peer, state: int(st), inode: f[9]})
	}
	return out
}

// procAddr reads an address as /proc/net/tcp prints it: 32-bit words in
// the host's byte order, in hex, then the port.
func procAddr(s string) (netip.AddrPort, bool) {
	host, port, ok := strings.Cut(s, ":")
	raw, err1 := hex.DecodeString(host)
	p, err2 := strconv.ParseUint(port, 16, 16)
	if !ok || err1 != nil || err2 != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 { // each word to network order
		binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(a, uint16(p)), true
}

// findHolders fills in the process of each listener whose socket inode
// a process of this host has open (its fd links read "socket:[inode]").
func findHolders(ls []listener, inodes map[string]int) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			inode, ok := strings.CutPrefix(link, "socket:[")
			if err != nil || !ok {
				continue
			}
			if i, ok := inodes[strings.TrimSuffix(inode, "]")]; ok && ls[i].pid == 0 {
				comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
				ls[i].pid, ls[i].comm = pid, strings.TrimSpace(string(comm))
			}
		}
	}
}

// describeListeners names the listeners of ls, "a, b and c".
func describeListeners(ls []listener) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	if len(s) > 1 {
		return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
	}
	return strings.Join(s, "")
}
