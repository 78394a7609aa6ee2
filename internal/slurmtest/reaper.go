//go:build linux

package slurmtest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

//go:embed reaper.sh
var reaperScript string

// reaper is the process that stops a cluster when the test ends or
// dies: it holds the read end of a pipe whose write end only this
// process holds (os.Pipe's ends are close-on-exec, so no child inherits
// it).
type reaper struct {
	cmd  *exec.Cmd
	w    *os.File
	done chan error
}

// startReaper starts reaper.sh for dir in a process group of its own
// (a Ctrl-C to the test's group does not reach it), its working
// directory / and its environment without dir.
func startReaper(dir string) (*reaper, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	r := &reaper{w: pw, done: make(chan error, 1)}
	r.cmd = exec.Command("bash", "-c", reaperScript)
	r.cmd.Stdin = pr
	r.cmd.Dir = "/"
	r.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("slurmtest: start the reaper: %w", err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	if _, err := fmt.Fprintln(pw, dir); err != nil {
		r.finish(time.Second)
		return nil, fmt.Errorf("slurmtest: tell the reaper %s: %w", dir, err)
	}
	return r, nil
}

// finish closes the pipe and waits, at most within, for the reaper to
// have killed what used the directory and deleted it.
func (r *reaper) finish(within time.Duration) error {
	r.w.Close()
	select {
	case err := <-r.done:
		if err != nil {
			return fmt.Errorf("slurmtest: the reaper: %v (1: processes still used the directory after 10 s)", err)
		}
		return nil
	case <-time.After(within):
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.done
		return fmt.Errorf("slurmtest: the reaper did not finish within %v: killed", within)
	}
}

// User is a process that uses a cluster's directory.
type User struct {
	Pid  int
	Name string // /proc/PID/comm
	Why  string // "command line", "environment", "working directory", "open file"
}

func (u User) String() string { return fmt.Sprintf("%d (%s, %s)", u.Pid, u.Name, u.Why) }

// Users lists the processes other than this one that use dir, as
// reaper.sh finds them: dir in the command line or environment, the
// working directory or an open file in it.
func Users(dir string) []User {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var users []User
	inDir := func(link string) bool {
		target, err := os.Readlink(link)
		return err == nil && (target == dir || strings.HasPrefix(target, dir+"/"))
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		why := ""
		for _, f := range []struct{ file, why string }{{"cmdline", "command line"}, {"environ", "environment"}} {
			if b, err := os.ReadFile(filepath.Join(p, f.file)); err == nil && strings.Contains(string(b), dir) && why == "" {
				why = f.why
			}
		}
		if why == "" && inDir(filepath.Join(p, "cwd")) {
			why = "working directory"
		}
		if why == "" {
			fds, _ := filepath.Glob(filepath.Join(p, "fd", "*"))
			for _, fd := range fds {
				if inDir(fd) {
					why = "open file"
					break
				}
			}
		}
		if why == "" {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(p, "comm"))
		users = append(users, User{Pid: pid, Name: strings.TrimSpace(string(comm)), Why: why})
	}
	sort.Slice(users, func(i, j int) bool { return users[i].Pid < users[j].Pid })
	return users
}
