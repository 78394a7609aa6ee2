// Package launch runs programs on a softdev device through the vendor's
// own libibverbs: an unchanged MLNX_OFED 4.9 libibverbs.so.1 with softdev
// as its provider (libsoftdev-rdmav2.so, built from softdev's C engine by
// make softdev). It is the library behind the `softdev exec` command.
//
// A program started this way sees, in a private mount namespace of its
// own (it and its children only):
//
//   - a sysfs tree ($SYSFS_PATH, on a tmpfs) with one uverbs device,
//     uverbs0, whose IB device softdev0 is a softdev at the device's
//     address: port 1 InfiniBand (or Ethernet), GID 0 the address as an
//     IPv4-mapped GID, as RoCE forms them, LID its low 16 bits (a dlid
//     names the address with those bits in the device's own /16, as one
//     subnet manager would assign them), P_Key 0xffff, the node GUID
//     derived from the address;
//   - /dev/infiniband/uverbs0 (where /dev has no /dev/infiniband, an
//     overlay of /dev adds it, with /dev's own mounts kept);
//   - /etc/libibverbs.d holding only softdev's driver line (the system's
//     hidden, so no driver it names is missing), naming the driver bound
//     in its directory softdev/ (the driver's own path may hold spaces,
//     which the driver line and LD_PRELOAD cannot);
//   - the legacy library first on LD_LIBRARY_PATH (with unpacked
//     packages, their usr/bin first on PATH: ibv_rc_pingpong, ib_send_lat,
//     … run by name), and the driver
//     preloaded (LD_PRELOAD): preloaded, it serves the calls libibverbs
//     would send to a kernel (ibv_create_comp_channel), so completion
//     events work (see driver/driver.c);
//   - the device's listener, bound by the launcher before the program
//     starts and held until it ends: a second launcher for the same
//     address is refused, and the device's address is the launcher's.
//
// Nothing outside the namespace changes but an empty directory in
// $TMPDIR (the tmpfs's mount point), removed when the program ends, and
// by the next launch if the launcher itself was killed.
//
// The device is the program's: when the program ends, its address is
// released, even if a descendant it left running still holds the
// listener (the driver marks its copy close-on-exec once it has it; a
// program that never opens the device, a shell, passes it on). Such a
// descendant keeps its files: the mount point stays until no process of
// the namespace is left, and a later launch removes it then. Its device
// can take no new connections.
//
// As root, programs and libraries are never taken from where another
// user could put their own: the package cache (UnpackDebs) is a
// directory of root's, checked against its manifest before every use,
// and -ofed, -driver and the packages are refused from a directory every
// user can write.
package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// WirePort is the TCP port softdev devices listen on (SD_WIRE_PORT).
const WirePort = 4791

// DriverEnv names the driver when Options.Driver is empty.
const DriverEnv = "SOFTDEV_DRIVER"

// DriverFile is the driver's file name; libibverbs loads a driver named
// NAME from NAME-rdmav2.so.
const DriverFile = "libsoftdev-rdmav2.so"

// Options say how to launch.
type Options struct {
	// Addr is the device's IP address, one of this host's (loopback, or
	// an interface's in a network namespace); "" takes the first
	// 127.0.0.x from 127.0.0.2 that no device serves.
	Addr string
	// OFED is where the legacy libibverbs.so.1 is: a directory holding
	// it or a root its packages were unpacked into. "" is the library
	// the dynamic loader finds (an installed MLNX_OFED).
	OFED string
	// Debs is a directory of MLNX_OFED .deb packages (DEBS/MLNX_LIBS):
	// unpacked into a cache (UnpackDebs) and used as OFED.
	Debs string
	// Driver is libsoftdev-rdmav2.so; "" is $SOFTDEV_DRIVER, else the file
	// of that name beside the running executable.
	Driver string
	// Ethernet makes port 1 an Ethernet (RoCE) port: no LID, the GID
	// names the peer. The default is InfiniBand.
	Ethernet bool
}

// Device is a softdev device ready to run programs on: its address is
// held (the listener is open) until Close.
type Device struct {
	Addr     netip.Addr
	LID      uint16 // 0 on an Ethernet port
	Lib      string // the legacy libibverbs.so.1 programs load
	Bin      string // the vendor's programs beside it (unpacked packages), or ""
	Driver   string
	ethernet bool
	listener *os.File
	scratch  []string // the mount points of the launches so far
}

// AddressInUseError says that another softdev (or another program) holds
// the device's address.
type AddressInUseError struct{ Addr netip.Addr }

func (e *AddressInUseError) Error() string {
	return fmt.Sprintf("%s is already served by another softdev (something listens on %s): give another address (-addr)",
		e.Addr, net.JoinHostPort(e.Addr.String(), strconv.Itoa(WirePort)))
}

// Prepare checks everything a launch needs before anything changes: the
// library (a legacy one), the driver, the address (bound and held).
func Prepare(o Options) (*Device, error) {
	if o.Debs != "" {
		root, err := UnpackDebs(o.Debs)
		if err != nil {
			return nil, fmt.Errorf("softdev exec: %w", err)
		}
		o.OFED = root
	}
	lib, err := findLibrary(o.OFED)
	if err != nil {
		return nil, fmt.Errorf("softdev exec: %w", err)
	}
	driver, err := findDriver(o.Driver)
	if err != nil {
		return nil, fmt.Errorf("softdev exec: %w", err)
	}
	sweepScratch()
	d := &Device{Lib: lib, Driver: driver, ethernet: o.Ethernet}
	if o.OFED != "" {
		if bin := filepath.Join(o.OFED, "usr/bin"); isDir(bin) {
			d.Bin = bin // the packages' programs: ibv_rc_pingpong, ib_send_lat, …
		}
	}
	if os.Geteuid() == 0 {
		// What runs as root never comes from where any user could put
		// another (the package cache was checked as it was made).
		for _, p := range []struct{ path, what string }{{lib, "the library"}, {d.Bin, "the programs"}, {driver, "the driver"}} {
			if p.path == "" || o.Debs != "" && p.path != driver {
				continue
			}
			if err := checkNotShared(p.path, p.what); err != nil {
				return nil, fmt.Errorf("softdev exec: %w", err)
			}
		}
	}
	if d.listener, d.Addr, err = hold(o.Addr); err != nil {
		return nil, fmt.Errorf("softdev exec: %w", err)
	}
	if !o.Ethernet {
		d.LID = lidOf(d.Addr)
	}
	return d, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// findDriver returns the driver's path, or an error that names the make
// target building it.
func findDriver(p string) (string, error) {
	if p == "" {
		p = os.Getenv(DriverEnv)
	}
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("no softdev driver given (-driver or $%s) and the launcher's own directory is unknown: %w", DriverEnv, err)
		}
		p = filepath.Join(filepath.Dir(exe), DriverFile)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("no softdev driver at %s: build it with `make softdev` in the verbsexp module (it writes .tmp/softdev/%s beside the softdev command), or point -driver or $%s at one", abs, DriverFile, DriverEnv)
	}
	return abs, nil
}

// hold binds the device's listener at addr (or the first free loopback
// address from 127.0.0.2) and returns it with the address.
func hold(addr string) (*os.File, netip.Addr, error) {
	if addr != "" {
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return nil, netip.Addr{}, fmt.Errorf("address %q is not a unicast IP address of this host", addr)
		}
		f, err := listenAt(a.Unmap())
		return f, a.Unmap(), err
	}
	for k := 2; k < 1<<16; k++ {
		if k&0xff == 0 || k&0xff == 255 {
			continue
		}
		a := netip.AddrFrom4([4]byte{127, 0, byte(k >> 8), byte(k)})
		f, err := listenAt(a)
		var inUse *AddressInUseError
		if errors.As(err, &inUse) {
			continue
		}
		return f, a, err
	}
	return nil, netip.Addr{}, errors.New("every loopback address from 127.0.0.2 to 127.0.255.254 is served by another softdev")
}

// listenAt binds a listening TCP socket at a:WirePort, as the engine's
// own listener would be (SO_REUSEADDR, so that a device's connections in
// TIME_WAIT do not keep its address from the next).
func listenAt(a netip.Addr) (*os.File, error) {
	family := syscall.AF_INET
	if !a.Is4() {
		family = syscall.AF_INET6
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("a socket for %s: %w", a, err)
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	var sa syscall.Sockaddr
	if a.Is4() {
		sa = &syscall.SockaddrInet4{Port: WirePort, Addr: a.As4()}
	} else {
		syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1)
		sa = &syscall.SockaddrInet6{Port: WirePort, Addr: a.As16()}
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, &AddressInUseError{Addr: a}
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("%s is not an address of this host (or of this network namespace): %w", a, err)
		}
		return nil, fmt.Errorf("binding %s: %w", net.JoinHostPort(a.String(), strconv.Itoa(WirePort)), err)
	}
	if err := syscall.Listen(fd, 128); err != nil {
		syscall.Close(fd)
		if errors.Is(err, syscall.EADDRINUSE) {
			// Another launcher bound it too (SO_REUSEADDR lets two bind
			// while neither listens) and listened first: it is taken.
			return nil, &AddressInUseError{Addr: a}
		}
		return nil, fmt.Errorf("listening at %s: %w", a, err)
	}
	return os.NewFile(uintptr(fd), "softdev-listener"), nil
}

// Command returns the command that runs name with args on the device.
// Its Env is the caller's environment plus the launch's plan: append to
// it, do not replace it. Each Command may run once; one Device may run
// several in turn or at once (they share the address: only one of them
// should open the device).
func (d *Device) Command(name string, args ...string) (*exec.Cmd, error) {
	if d.listener == nil {
		return nil, errors.New("softdev exec: the device is closed")
	}
	scratch, err := newScratch()
	if err != nil {
		return nil, fmt.Errorf("softdev exec: %w", err)
	}
	d.scratch = append(d.scratch, scratch)
	p := plan{
		Scratch:  scratch,
		Tree:     sysfsTree(d.Addr, d.ethernet),
		Lib:      d.Lib,
		Bin:      d.Bin,
		Driver:   d.Driver,
		Program:  name,
		Args:     args,
		Listener: fmt.Sprintf("%s=%d", ibdevName, 3),
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("softdev exec: the launcher's own executable: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Args = append([]string{name}, args...)
	cmd.Env = append(os.Environ(), stageEnv+"="+string(b))
	cmd.ExtraFiles = []*os.File{d.listener} // fd 3 in the child
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd, nil
}

// Close releases the address and removes what the launches left; call
// it once the commands have ended. The listener is shut, not only
// closed: a descendant of a program that outlives it and still holds the
// program's copy (fd 3, inherited before the driver marked it
// close-on-exec, or by a program that never opened the device) no longer
// keeps the address. A mount point that a living process of a launch's
// namespace still uses stays, for a later launch to remove (removing it
// would take the files from under that process).
func (d *Device) Close() error {
	var err error
	if d.listener != nil {
		if rc, cerr := d.listener.SyscallConn(); cerr == nil {
			rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
		}
		err = d.listener.Close()
		d.listener = nil
	}
	if len(d.scratch) > 0 {
		inUse := mountPoints()
		for _, s := range d.scratch {
			if !inUse[s] {
				removeScratch(s)
			}
		}
	}
	d.scratch = nil
	return err
}

// StartError explains why a launch could not start.
func StartError(err error) error {
	if errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("softdev exec: cannot make a private mount namespace (%w): the launcher needs root (CAP_SYS_ADMIN) to mount the device's files for the program alone", err)
	}
	return fmt.Errorf("softdev exec: %w", err)
}

// ExitCode is the status a launcher exits with for a finished command:
// the program's, or 128 plus the signal that ended it, as a shell says.
func ExitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// scratchPrefix names the launches' mount points in $TMPDIR; the pid of
// the launcher follows, so a later launch can tell a dead one's.
const scratchPrefix = "softdev-exec."

func newScratch() (string, error) {
	return os.MkdirTemp("", fmt.Sprintf("%s%d.", scratchPrefix, os.Getpid()))
}

// removeScratch removes a mount point: an empty directory outside the
// namespace (what was mounted there went with it).
func removeScratch(dir string) {
	if dir != "" {
		syscall.Rmdir(dir)
	}
}

// sweepScratch removes the mount points of launchers that died before
// removing theirs, or left them to a program's descendants: empty
// directories whose pid no longer runs, mounted in no namespace.
func sweepScratch() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), scratchPrefix+"*"))
	var inUse map[string]bool
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), scratchPrefix)
		pid, err := strconv.Atoi(strings.SplitN(rest, ".", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if inUse == nil {
			inUse = mountPoints()
		}
		if !inUse[m] {
			syscall.Rmdir(m) // only if empty: never anything else
		}
	}
}

// mountPoints are the mount points of every mount namespace a process
// of this host is in (/proc/PID/mountinfo, once per namespace): a
// launch's scratch directory among them is a living program's files.
func mountPoints() map[string]bool {
	points := map[string]bool{}
	seen := map[string]bool{}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		ns, err := os.Readlink(filepath.Join(p, "ns/mnt"))
		if err != nil || seen[ns] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, "mountinfo"))
		if err != nil {
			continue // gone meanwhile
		}
		seen[ns] = true
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 {
				points[unescapeMount(f[4])] = true
			}
		}
	}
	return points
}
