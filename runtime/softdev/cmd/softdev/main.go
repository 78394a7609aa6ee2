// Command softdev runs programs on a softdev device through the vendor's
// own MLNX_OFED libibverbs (package launch says what the program sees):
//
//	softdev exec [-addr IP] [-ofed DIR | -ofed-debs DIR] [-driver FILE] [-ethernet] -- PROG [ARGS...]
//
// It exits with the program's status (128 plus the signal that ended it).
//
//	softdev build-driver [-ofed DIR | -ofed-debs DIR] [-include DIR] [-o FILE]
//
// builds the driver it loads (libsoftdev-rdmav2.so, from softdev's C
// engine) against MLNX_OFED's headers and library; `make softdev` builds
// both into .tmp/softdev/.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func usage(fs *flag.FlagSet) {
	fmt.Fprintf(fs.Output(), "usage: softdev exec [flags] -- PROG [ARGS...]\n\nRuns PROG on a softdev device through MLNX_OFED's own libibverbs.so.1.\n\nflags:\n")
	fs.PrintDefaults()
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "build-driver" {
		return buildDriver(args[1:])
	}
	if len(args) == 0 || args[0] != "exec" {
		fmt.Fprintln(os.Stderr, "usage: softdev exec [flags] -- PROG [ARGS...]\n       softdev build-driver [flags]\n(-h after either: its flags)")
		return 2
	}
	fs := flag.NewFlagSet("softdev exec", flag.ContinueOnError)
	var o launch.Options
	fs.StringVar(&o.Addr, "addr", "", "the device's IP address (default: the first free 127.0.0.x from 127.0.0.2)")
	fs.StringVar(&o.OFED, "ofed", "", "where MLNX_OFED's legacy libibverbs.so.1 is: its directory, or the root its packages were unpacked into (default: the one the dynamic loader finds)")
	fs.StringVar(&o.Debs, "ofed-debs", os.Getenv("OFED_DEBS"), "a directory of MLNX_OFED .deb packages to unpack (into a cache) and use (default $OFED_DEBS)")
	fs.StringVar(&o.Driver, "driver", "", "libsoftdev-rdmav2.so (default $"+launch.DriverEnv+", else beside this command)")
	fs.BoolVar(&o.Ethernet, "ethernet", false, "an Ethernet (RoCE) port instead of InfiniBand")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		usage(fs)
		return 2
	}
	dev, err := launch.Prepare(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer dev.Close()
	cmd, err := dev.Command(fs.Arg(0), fs.Args()[1:]...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The program has the terminal's signals itself; the launcher waits
	// for it, and passes on what is sent to the launcher alone.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, launch.StartError(err))
		return 1
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	if err := cmd.Wait(); err != nil {
		return launch.ExitCode(err)
	}
	return 0
}

func buildDriver(args []string) int {
	fs := flag.NewFlagSet("softdev build-driver", flag.ContinueOnError)
	b := launch.Build{}
	debs := fs.String("ofed-debs", os.Getenv("OFED_DEBS"), "a directory of MLNX_OFED .deb packages to unpack (into a cache) and build against (default $OFED_DEBS)")
	fs.StringVar(&b.OFED, "ofed", "", "the root of an MLNX_OFED install or of its unpacked packages (default /: the installed MLNX_OFED)")
	fs.StringVar(&b.Include, "include", "", "the directory holding infiniband/driver.h, if not under -ofed (OFED_INCLUDE)")
	fs.StringVar(&b.Out, "o", launch.DriverFile, "the file to write")
	fs.StringVar(&b.Src, "src", "", "runtime/softdev's directory (default: found with go list)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if *debs != "" && b.OFED == "" {
		if b.OFED, err = launch.UnpackDebs(*debs); err != nil {
			fmt.Fprintln(os.Stderr, "softdev build-driver:", err)
			return 1
		}
	}
	if b.Src == "" {
		if b.Src, err = launch.SourceDir(); err != nil {
			fmt.Fprintln(os.Stderr, "softdev build-driver:", err)
			return 1
		}
	}
	if err := b.Driver(); err != nil {
		fmt.Fprintln(os.Stderr, "softdev build-driver:", err)
		return 1
	}
	return 0
}
