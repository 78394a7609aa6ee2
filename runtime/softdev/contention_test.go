//go:build linux && cgo

package softdev

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/internal/netns"
)

// Open under contention, in a network namespace of the test's own (its
// loopback is the test's to fill: the host's stays untouched). Rank 0
// opens devices, 32 goroutines at a time; ranks 1 to 3 hold loopback
// addresses meanwhile: plain listeners at port WirePort, and devices of
// their own that they close and open again all along. Every Open must
// end in a device at an address of its own or an error saying why,
// never a nil device without an error:
//
//   - among other processes' listeners and devices, every Open gets a
//     free address, none of them a held one, no two the same;
//   - while a program listens at WirePort at a wildcard address
//     (0.0.0.0, then [::]), which takes the port at every loopback
//     address at once, every Open fails at once with EADDRINUSE, saying
//     so and naming that program's listener and pid (before, each Open
//     tried all 16.7 million loopback addresses, 90 s on 2 cores, and
//     then blamed them all);
//   - once that program has gone, Open gets 127.0.0.2 again.
func TestOpenUnderContention(t *testing.T) {
	self, isRank := multiproc.Rank()
	if !isRank {
		host := netns.Isolated(t)
		multiproc.Run(t, 1+contentionHolders, multiproc.Config{Timeout: 60 * time.Second,
			Wrap: func(int) []string { return host.Wrap() }})
		return
	}
	exchange := self.Exchange()
	if self.Rank == 0 {
		openerRank(t, exchange)
	} else {
		holderRank(t, self.Rank, exchange)
	}
}

const (
	contentionHolders = 3
	heldListeners     = 40 // plain listeners per holder
	heldDevices       = 16 // devices per holder, churned
	openers           = 32 // rank 0's goroutines
)

// contentionNote is what a rank publishes in each round.
type contentionNote struct {
	Pid  int
	Held []string // round 1: the listeners' addresses
}

func publish(t *testing.T, exchange func([]byte) ([][]byte, error), n contentionNote) []contentionNote {
	t.Helper()
	b, _ := json.Marshal(n)
	all, err := exchange(b)
	if err != nil {
		t.Fatal(err)
	}
	notes := make([]contentionNote, len(all))
	for i, b := range all {
		if err := json.Unmarshal(b, &notes[i]); err != nil {
			t.Fatalf("rank %d's note %q: %v", i, b, err)
		}
	}
	return notes
}

// openChecked opens a device and checks what Open promises: a device and
// no error, or no device and an error.
func openChecked() (*Device, error) {
	d, err := Open()
	switch {
	case err == nil && d.isNil():
		return nil, errors.New("Open returned no device and no error")
	case err != nil && d != nil:
		d.Close()
		return nil, fmt.Errorf("Open returned a device with its error %v", err)
	}
	return d, err
}

// concurrently runs f on n goroutines and returns their errors, joined.
func concurrently(n int, f func(g int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[g] = f(g) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func holderRank(t *testing.T, rank int, exchange func([]byte) ([][]byte, error)) {
	// Round 1: hold listeners (at addresses spread among the first 200)
	// and devices, and keep replacing the devices.
	var lns []net.Listener
	var held []string
	for k := rank; len(lns) < heldListeners && k < 256; k += contentionHolders {
		at := fmt.Sprintf("127.0.0.%d", 2+k)
		ln, err := net.Listen("tcp4", net.JoinHostPort(at, fmt.Sprint(WirePort)))
		if err != nil {
			continue // a device got there first
		}
		lns, held = append(lns, ln), append(held, at)
	}
	devs := make([]*Device, heldDevices)
	if err := concurrently(heldDevices, func(g int) (err error) { devs[g], err = openChecked(); return err }); err != nil {
		t.Fatal(err)
	}
	stop, churned := make(chan struct{}), make(chan error)
	go func() {
		var err error
		for i := 0; err == nil; i++ {
			select {
			case <-stop:
				churned <- nil
				return
			default:
			}
			g := i % heldDevices
			if err = devs[g].Close(); err == nil {
				devs[g], err = openChecked()
			}
		}
		churned <- err
	}()
	publish(t, exchange, contentionNote{Pid: os.Getpid(), Held: held})
	publish(t, exchange, contentionNote{}) // rank 0 has opened its devices
	close(stop)
	if err := <-churned; err != nil {
		t.Errorf("replacing a device while rank 0 opens its own: %v", err)
	}
	for _, d := range devs {
		if d != nil {
			d.Close()
		}
	}
	for _, ln := range lns {
		ln.Close()
	}
	publish(t, exchange, contentionNote{}) // nobody listens
	// Then rank 1, then rank 2, listens at the wildcard address while
	// rank 0 opens.
	for i, network := range []string{"tcp4", "tcp"} {
		var ln net.Listener
		if rank == 1+i {
			var err error
			if ln, err = net.Listen(network, fmt.Sprintf(":%d", WirePort)); err != nil {
				t.Fatalf("listening at the wildcard address (%s): %v", network, err)
			}
		}
		publish(t, exchange, contentionNote{Pid: os.Getpid()})
		publish(t, exchange, contentionNote{}) // rank 0 has tried
		if ln != nil {
			ln.Close()
		}
		publish(t, exchange, contentionNote{}) // nobody listens
	}
	publish(t, exchange, contentionNote{}) // rank 0 has opened again
}

func openerRank(t *testing.T, exchange func([]byte) ([][]byte, error)) {
	notes := publish(t, exchange, contentionNote{Pid: os.Getpid()})
	held := map[netip.Addr]int{}
	for r, n := range notes {
		for _, a := range n.Held {
			held[netip.MustParseAddr(a)] = r
		}
	}
	if len(held) < contentionHolders*heldListeners/2 {
		t.Errorf("the holders hold %d listeners", len(held))
	}
	var mu sync.Mutex
	mine := map[netip.Addr]int{} // open now, by goroutine
	err := concurrently(openers, func(g int) error {
		for range 8 {
			var devs []*Device
			for range 2 {
				d, err := openChecked()
				if err != nil {
					return err
				}
				devs = append(devs, d)
				a := d.Addr()
				mu.Lock()
				other, dup := mine[a]
				mine[a] = g
				mu.Unlock()
				switch r, isHeld := held[a]; {
				case !a.IsLoopback() || a == netip.MustParseAddr("127.0.0.1"):
					return fmt.Errorf("a device at %v", a)
				case isHeld:
					return fmt.Errorf("a device at %v, where rank %d listens", a, r)
				case dup:
					return fmt.Errorf("two devices at %v (goroutines %d and %d)", a, other, g)
				}
			}
			for _, d := range devs {
				mu.Lock()
				delete(mine, d.Addr())
				mu.Unlock()
				if err := d.Close(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("%d goroutines opening devices among 3 processes holding addresses: %v", openers, err)
	}
	publish(t, exchange, contentionNote{})
	publish(t, exchange, contentionNote{}) // the holders have closed theirs

	for i, want := range []string{"0.0.0.0:4791", "[::]:4791"} {
		notes := publish(t, exchange, contentionNote{})
		listening := fmt.Sprintf("%s (pid %d, ", want, notes[1+i].Pid)
		err := concurrently(openers, func(int) error {
			d, err := openChecked()
			switch {
			case err == nil:
				defer d.Close()
				return fmt.Errorf("a device at %v while %s listens", d.Addr(), want)
			case !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "taken at every loopback address at once") ||
				!strings.Contains(err.Error(), listening):
				return fmt.Errorf("want EADDRINUSE saying the port is taken at every address, by %s…): %w", listening, err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("while a program listens at %s: %v", want, err)
		}
		publish(t, exchange, contentionNote{})
		publish(t, exchange, contentionNote{}) // it has stopped
	}

	d, err := openChecked()
	if err != nil {
		t.Fatalf("once nothing listens: %v", err)
	}
	if a := d.Addr(); a != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("once nothing listens, the first device is at %v, not 127.0.0.2", a)
	}
	d.Close()
	publish(t, exchange, contentionNote{})
}
