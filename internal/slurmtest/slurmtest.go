//go:build linux

// Package slurmtest runs a one-node Slurm cluster for a test, so that
// what the README says of srun is tested on Slurm itself: munged,
// slurmctld and slurmd of the test's own, on ports of their own, with
// the key, socket, configuration, state, spool and logs in a directory
// of their own (os.TempDir()/verbsexp-slurm-PID-RANDOM). Nothing
// system-wide is read or changed: /etc/slurm and /etc/munge are not
// used, and srun finds the cluster through SLURM_CONF in the environment
// Cluster.Env gives.
//
// Nothing outlives the test: a reaper (a shell in a process group of its
// own, ignoring SIGINT, SIGTERM and SIGHUP) holds one end of a pipe the
// test process holds the other of; when the test ends, or its process
// dies without running its cleanup (a timeout's panic, SIGKILL,
// Ctrl-C), the pipe closes and the reaper kills every process that uses
// the directory (the daemons, slurmstepd, the job's tasks, srun: by its
// command line, environment, working directory or open files) and
// deletes it. A Start that finds a directory left by a process that is
// gone does the same to it first, as internal/netns does for
// namespaces.
//
// It needs root (slurmd starts the tasks) and Slurm with munge
// installed (Debian: apt-get install slurm-wlm munge; make test
// installs them); without them Start skips the test, saying so.
package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// Cluster is a running one-node cluster.
type Cluster struct {
	Dir  string // everything the cluster writes
	Conf string // its slurm.conf (SLURM_CONF)
	// Node is the cluster's one node: this host's short name, so that a
	// job script's "first node of the allocation" resolves, as on a
	// cluster (slurmd reaches it at 127.0.0.1 whatever the name says).
	Node string
	CPUs int // what the node claims (config_overrides: more than the machine has is fine)
	// Version is srun's, e.g. "slurm-wlm 22.05.8".
	Version string
	// MPI is what srun --mpi=list offers, e.g. [pmix none cray_shasta pmi2].
	MPI []string

	daemons []*daemon
}

// prefix names the directories; stale matches those Start sweeps.
const prefix = "verbsexp-slurm-"

var stale = regexp.MustCompile(`^` + prefix + `(\d+)-[0-9a-f]{8}$`)

// The programs the cluster needs, and where each comes from on Debian.
var programs = []struct{ name, pkg string }{
	{"munged", "munge"}, {"slurmctld", "slurmctld"}, {"slurmd", "slurmd"},
	{"srun", "slurm-client"}, {"sinfo", "slurm-client"}, {"salloc", "slurm-client"}, {"scontrol", "slurm-client"},
}

// InstallCommand is what installs the programs Start needs.
const InstallCommand = "apt-get install -y --no-install-recommends slurm-wlm munge"

// Start runs a cluster whose node claims cpus CPUs and stops it when t
// ends. It fails t if the cluster does not come up (with the daemons'
// logs), and skips t, saying why, without root or Slurm.
func Start(t testing.TB, cpus int) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip("SKIPPED: " + err.Error())
	}
	sweep(t)
	var r [4]byte
	rand.Read(r[:])
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), hex.EncodeToString(r[:])))
	// munged wants every directory on the way to its socket searchable
	// by all, and none writable by others.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // past the umask
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), CPUs: cpus}
	reaper, err := startReaper(dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(t, reaper) })
	for _, d := range []string{"log", "spool", "state", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.startMunge(); err != nil {
		t.Fatal(err)
	}
	if err := c.startSlurm(); err != nil {
		t.Fatal(err)
	}
	if err := c.describe(); err != nil {
		t.Fatal(err)
	}
	return c
}

// Available says why Start cannot run a cluster here (nil if it can).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("a Slurm cluster of the test's own needs root (slurmd starts the job's tasks); CI runs this as root")
	}
	for _, p := range programs {
		if _, err := exec.LookPath(p.name); err != nil {
			return fmt.Errorf("no %s (Debian package %s): install Slurm with: %s (make test installs it as root)", p.name, p.pkg, InstallCommand)
		}
	}
	return nil
}

// Env is the environment for srun and sinfo: this process's, without
// what a launcher that started this test set (its SLURM_*, PMIX_* and
// OMPI_* would point srun at another job), with SLURM_CONF, then extra.
func (c *Cluster) Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLURM_") || strings.HasPrefix(kv, "PMIX_") || strings.HasPrefix(kv, "OMPI_") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "SLURM_CONF="+c.Conf), extra...)
}

// Srun is srun with args on the cluster (Job's srun).
func (c *Cluster) Srun(t testing.TB, ctx context.Context, extraEnv []string, args ...string) *exec.Cmd {
	t.Helper()
	return c.Job(t, ctx, extraEnv, "srun", args...)
}

// Job is a command that submits a job (srun, salloc, sbatch) with args
// on the cluster, in a process group of its own that is killed when ctx
// ends. It first waits for the node to be idle: a job submitted while
// the node still completes the last one is not placed until the
// scheduler's next pass (up to seconds later).
func (c *Cluster) Job(t testing.TB, ctx context.Context, extraEnv []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	if err := c.waitIdle(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Env(extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// HasMPI reports whether srun offers the MPI plugin type (srun
// --mpi=list).
func (c *Cluster) HasMPI(name string) bool { return slices.Contains(c.MPI, name) }

// daemon is one of the cluster's processes and its end.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string // its stdout and stderr
	done chan struct{}
	err  error // once done is closed
}

// start runs a daemon in the foreground of a process group of its own,
// its output to log/NAME.out.
func (c *Cluster) start(name string, args ...string) (*daemon, error) {
	d := &daemon{name: name, log: filepath.Join(c.Dir, "log", name+".out"), done: make(chan struct{})}
	out, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	d.cmd = exec.Command(name, args...)
	d.cmd.Dir = c.Dir
	d.cmd.Env = c.Env()
	d.cmd.Stdout, d.cmd.Stderr = out, out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("slurmtest: start %s: %w", name, err)
	}
	c.daemons = append(c.daemons, d)
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	return d, nil
}

// exited is an error if d has ended, with its output's tail.
func (d *daemon) exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("slurmtest: %s ended (%v); it printed:\n%s", d.name, d.err, tail(d.log, 30))
	default:
		return nil
	}
}

func (c *Cluster) startMunge() error {
	key := make([]byte, 1024)
	rand.Read(key)
	keyFile := filepath.Join(c.Dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return err
	}
	socket := c.mungeSocket()
	if len(socket) >= 108 { // sun_path
		return fmt.Errorf("slurmtest: munged's socket %s is too long a path for a socket: set TMPDIR to a shorter directory", socket)
	}
	d, err := c.start("munged", "--foreground", "--key-file="+keyFile, "--socket="+socket,
		"--log-file="+filepath.Join(c.Dir, "log", "munged.log"), "--pid-file="+filepath.Join(c.Dir, "munged.pid"),
		"--seed-file="+filepath.Join(c.Dir, "munged.seed"))
	if err != nil {
		return err
	}
	return waitFor(10*time.Second, "munged's socket "+socket, func() (bool, error) {
		_, err := os.Stat(socket)
		return err == nil, d.exited()
	})
}

func (c *Cluster) mungeSocket() string { return filepath.Join(c.Dir, "munge.socket") }

//go:embed slurm.conf.tmpl
var confText string

var confTemplate = template.Must(template.New("slurm.conf").Parse(confText))

// startSlurm writes slurm.conf with two free ports and starts slurmctld
// and slurmd; it returns once the node is idle.
func (c *Cluster) startSlurm() error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	host, _, _ = strings.Cut(host, ".") // slurmctld compares its short name
	c.Node = host
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	var conf bytes.Buffer
	if err := confTemplate.Execute(&conf, map[string]any{
		"Dir": c.Dir, "Host": host, "Node": c.Node, "CPUs": c.CPUs,
		"CtldPort": ports[0], "SlurmdPort": ports[1], "MungeSocket": c.mungeSocket(),
	}); err != nil {
		return err
	}
	if err := os.WriteFile(c.Conf, conf.Bytes(), 0o644); err != nil {
		return err
	}
	if _, err := c.start("slurmctld", "-D", "-f", c.Conf); err != nil {
		return err
	}
	if _, err := c.start("slurmd", "-D", "-f", c.Conf, "-N", c.Node); err != nil {
		return err
	}
	return c.waitIdle(30 * time.Second)
}

// waitIdle waits for the node to be idle, and fails if a daemon ended.
func (c *Cluster) waitIdle(within time.Duration) error {
	var state string
	err := waitFor(within, "node "+c.Node+" to be idle", func() (bool, error) {
		for _, d := range c.daemons {
			if err := d.exited(); err != nil {
				return false, err
			}
		}
		out, _ := c.command("sinfo", "-h", "-N", "-n", c.Node, "-o", "%T").Output()
		state = strings.TrimSpace(string(out))
		return state == "idle", nil
	})
	if err != nil {
		return fmt.Errorf("%w (sinfo says %q); slurmctld's log:\n%s\nslurmd's log:\n%s", err, state,
			c.Log("slurmctld.log", 20), c.Log("slurmd.log", 20))
	}
	return nil
}

// describe fills in Version and MPI.
func (c *Cluster) describe() error {
	out, err := c.command("srun", "--version").Output()
	if err != nil {
		return fmt.Errorf("slurmtest: srun --version: %v", err)
	}
	c.Version = strings.TrimSpace(string(out))
	out, err = c.command("srun", "--mpi=list").CombinedOutput()
	if err != nil {
		return fmt.Errorf("slurmtest: srun --mpi=list: %v: %s", err, out)
	}
	// "MPI plugin types are...", then one indented name a line, then
	// "specific pmix plugin versions available: pmix_v4".
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 1 && (strings.HasPrefix(l, "\t") || strings.HasPrefix(l, " ")) {
			c.MPI = append(c.MPI, f[0])
		}
	}
	if len(c.MPI) == 0 {
		return fmt.Errorf("slurmtest: srun --mpi=list names no plugin:\n%s", out)
	}
	return nil
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env()
	return cmd
}

// Log is the tail of one of the cluster's logs (slurmctld.log,
// slurmd.log, munged.log, or NAME.out for a daemon's own output), for a
// failing test to show.
func (c *Cluster) Log(name string, lines int) string {
	return tail(filepath.Join(c.Dir, "log", name), lines)
}

// stop ends the cluster: it closes the reaper's pipe, waits for the
// reaper to kill what uses the directory and delete it, reaps the
// daemons, and fails t if any process still uses the directory.
func (c *Cluster) stop(t testing.TB, r *reaper) {
	if t.Failed() {
		t.Logf("slurmtest: the cluster's logs, for the failure above:\nslurmctld:\n%s\nslurmd:\n%s", c.Log("slurmctld.log", 15), c.Log("slurmd.log", 15))
	}
	if err := r.finish(30 * time.Second); err != nil {
		t.Error(err)
	}
	for _, d := range c.daemons {
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			t.Errorf("slurmtest: %s (pid %d) did not end after the reaper killed it", d.name, d.cmd.Process.Pid)
		}
	}
	if users := Users(c.Dir); len(users) > 0 {
		t.Errorf("slurmtest: processes still use %s after the cluster stopped: %v", c.Dir, users)
		for _, u := range users {
			syscall.Kill(u.Pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		t.Errorf("slurmtest: %s is still there after the reaper deleted it", c.Dir)
		os.RemoveAll(c.Dir)
	}
}

// sweep stops what runs whose process is gone left: their directories
// and every process still using one.
func sweep(t testing.TB) {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		m := stale.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		t.Logf("slurmtest: stopping what %s holds (left by process %s, gone): %v", dir, m[1], Users(dir))
		r, err := startReaper(dir)
		if err == nil {
			err = r.finish(30 * time.Second)
		}
		if err != nil {
			t.Errorf("slurmtest: sweeping %s: %v", dir, err)
		}
	}
}

// FreePort is a TCP port nothing listens on now, e.g. a job's
// MASTER_PORT.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// freePorts finds n TCP ports nothing listens on (on any address: the
// daemons listen on all), by listening on port 0.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("slurmtest: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitFor polls cond every 50 ms until it holds, fails or within ends.
func waitFor(within time.Duration, what string, cond func() (bool, error)) error {
	for end := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("slurmtest: waited %v for %s", within, what)
		}
	}
}

// tail is a file's last lines.
func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
