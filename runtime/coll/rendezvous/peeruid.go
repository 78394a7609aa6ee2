package rendezvous

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// A job without a token admits only its own user's processes: on
// loopback, where it may run, the kernel knows which user made each end
// of a connection, and says so to anyone who asks (sock_diag(7), what
// ss(8) reads; an accepted connection's user is its listener's).
// Processes of the same user could read the job's memory anyway; root
// may join any job. The job's identity is no secret: it is sent to
// whoever connects, and is never what keeps anyone out.

// The kernel's socket states the lookups accept: a full socket, whose
// user the kernel reports (a connection not yet accepted from the
// listener's queue is SYN_RECV for a moment, and reported as root's).
const (
	tcpEstablished = 1
	tcpSynRecv     = 3
	tcpCloseWait   = 8
)

// peerUID is the uid of the process that made the other end of c (a TCP
// connection within this host), asked of the kernel by the other end's
// addresses.
func peerUID(c net.Conn) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("not a TCP connection (%T)", c)
	}
	var err error
	for range 200 { // a SYN_RECV end becomes a full socket within a moment
		var uid, state int
		uid, state, err = socketUID(remote.AddrPort(), local.AddrPort())
		switch {
		case err != nil:
			return 0, err
		case state == tcpEstablished || state == tcpCloseWait:
			return uid, nil
		case state != tcpSynRecv:
			return 0, fmt.Errorf("the other end of the connection from %s is closing (state %d)", remote, state)
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("the other end of the connection from %s was not accepted within 200 ms", remote)
}

// socketUID asks the kernel (a NETLINK_SOCK_DIAG request for one socket)
// for the uid and state of the TCP socket whose local address is local
// and remote address remote. An IPv4 address is looked for among IPv4
// sockets, then IPv6 ones (as a mapped address).
func socketUID(local, remote netip.AddrPort) (uid, state int, err error) {
	families := []int{syscall.AF_INET6}
	if local.Addr().Unmap().Is4() && remote.Addr().Unmap().Is4() {
		families = []int{syscall.AF_INET, syscall.AF_INET6}
	}
	for _, family := range families {
		uid, state, err = diagOne(family, local, remote)
		if !errors.Is(err, syscall.ENOENT) {
			return uid, state, err
		}
	}
	return 0, 0, fmt.Errorf("the kernel knows no socket at %s connected to %s (closed already?)", local, remote)
}

// diagOne is one inet_diag request (struct inet_diag_req_v2) for the
// socket of family at local, connected to remote, and the uid and state
// of its answer (struct inet_diag_msg), or the kernel's errno.
func diagOne(family int, local, remote netip.AddrPort) (uid, state int, err error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return 0, 0, fmt.Errorf("asking the kernel which user a connection is from (sock_diag): %w", err)
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(int64(5 * time.Second))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	addr := func(a netip.Addr) []byte {
		if family == syscall.AF_INET {
			b := a.Unmap().As4()
			return append(b[:], make([]byte, 12)...)
		}
		b := netip.AddrFrom16(a.As16()).As16() // IPv4 as ::ffff:a.b.c.d
		return b[:]
	}
	const sockDiagByFamily = 20
	req := make([]byte, 0, syscall.SizeofNlMsghdr+56)
	req = binary.NativeEndian.AppendUint32(req, uint32(syscall.SizeofNlMsghdr+56))
	req = binary.NativeEndian.AppendUint16(req, sockDiagByFamily)
	req = binary.NativeEndian.AppendUint16(req, syscall.NLM_F_REQUEST)
	req = binary.NativeEndian.AppendUint32(req, 1) // seq
	req = binary.NativeEndian.AppendUint32(req, 0) // pid: the kernel
	req = append(req, byte(family), syscall.IPPROTO_TCP, 0, 0)
	req = binary.NativeEndian.AppendUint32(req, ^uint32(0)) // every state
	req = binary.BigEndian.AppendUint16(req, local.Port())
	req = binary.BigEndian.AppendUint16(req, remote.Port())
	req = append(req, addr(local.Addr())...)
	req = append(req, addr(remote.Addr())...)
	req = binary.NativeEndian.AppendUint32(req, 0)          // any interface
	req = binary.NativeEndian.AppendUint64(req, ^uint64(0)) // no cookie
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, 0, fmt.Errorf("asking the kernel which user a connection is from (sock_diag): %w", err)
	}
	buf := make([]byte, 8192)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("the kernel's answer (sock_diag): %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return 0, 0, fmt.Errorf("the kernel's answer (sock_diag) does not parse: %v", err)
	}
	m := msgs[0]
	switch {
	case m.Header.Type == syscall.NLMSG_ERROR && len(m.Data) >= 4:
		errno := -int32(binary.NativeEndian.Uint32(m.Data))
		return 0, 0, syscall.Errno(errno)
	case m.Header.Type != sockDiagByFamily || len(m.Data) < 72:
		return 0, 0, fmt.Errorf("the kernel's answer (sock_diag) is of type %d, %d bytes", m.Header.Type, len(m.Data))
	}
	// struct inet_diag_msg: family, state, timer, retrans, id (48 bytes),
	// expires, rqueue, wqueue, uid, inode.
	return int(binary.NativeEndian.Uint32(m.Data[64:])), int(m.Data[1]), nil
}

// trustedUID says whether a token-less job admits a process of uid:
// this process's user, or root.
func trustedUID(uid int) bool { return uid == os.Geteuid() || uid == 0 }

// strangerError is a token-less job's refusal of a process of another
// user: one that connected from addr, or (listens) what listens at addr.
func strangerError(uid int, addr string, listens bool) error {
	who := fmt.Sprintf("a process of uid %d at %s", uid, addr)
	if listens {
		who = fmt.Sprintf("what listens at %s is a process of uid %d", addr, uid)
	}
	return fmt.Errorf("%s, neither this job's user (uid %d) nor root: a job without a token admits only its own user's processes "+
		"(to run ranks as several users, give every rank the job's token: VERBSEXP_JOB_TOKEN)", who, os.Geteuid())
}
