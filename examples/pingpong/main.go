//go:build linux && cgo

// Command pingpong bounces messages between two queue pairs with a
// cross-channel schedule that is posted once: after the posts, the device
// runs every round trip without the CPU. Each side's task list is a
// receive task (one receive per round) and a send task: ping sends round
// i, then waits (CQE_WAIT) for the pong of round i; pong waits for ping i,
// then sends back the very buffer it landed in, so the data goes round
// without being touched. Every wait is for one CQE beyond the one before
// on the same CQ: each carries WAIT_EN_LAST, which moves the CQ's wait
// base past it.
//
// The whole schedule is in the queues at once: a send queue holds two
// WQEs per round and a receive queue one, so -rounds is bounded by the
// device's max_qp_wr (and max_cqe); pingpong says which limit a -rounds
// value hits. The software device's limits can be raised with -max-wr and
// -max-cqe.
//
// It ports no vendor program, so it has none to talk to: the vendor's
// ibv_task_pingpong posts a task list per message from two processes,
// this example posts the whole schedule once, between two QPs of one
// process (its counterpart across processes, talking to the vendor's
// program, is examples/ccpingpong).
//
// It runs on the software device (runtime/softdev), so it needs no
// hardware:
//
//	go run ./examples/pingpong -rounds 1000 -size 64
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/examplecli"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

func main() {
	examplecli.Usage("pingpong", "Bounces -rounds messages of -size bytes between two queue pairs of the\nsoftware device with a cross-channel schedule that is posted once: the\ndevice runs every round trip without the CPU.")
	rounds := flag.Int("rounds", 1000, "round trips")
	size := flag.Int("size", 64, "message size in bytes")
	maxWR := flag.Int("max-wr", softdev.DefaultLimits.MaxQPWR, "the software device's max_qp_wr (WQEs per queue)")
	maxCQE := flag.Int("max-cqe", softdev.DefaultLimits.MaxCQE, "the software device's max_cqe (entries per CQ)")
	flag.Parse()
	if err := run(*rounds, *size, softdev.Limits{MaxQPWR: *maxWR, MaxCQE: *maxCQE}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

// LimitError says which queue or CQ a -rounds value does not fit.
type LimitError struct {
	Rounds int
	What   string // "send queue", "receive queue", "receive CQ"
	Need   int    // entries needed
	Limit  string // the device attribute: max_qp_wr or max_cqe
	Max    int    // its value
	Flag   string // the flag that raises it on the software device
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("-rounds %d needs %d entries in each %s, more than the device's %s of %d: lower -rounds, or raise the software device's limit with %s=%d",
		e.Rounds, e.Need, e.What, e.Limit, e.Max, e.Flag, e.Need)
}

// checkLimits asks the device (ibv_exp_query_device, as with an HCA)
// whether the schedule fits.
func checkLimits(ctx *verbs.Context, rounds int) error {
	attr, err := cmem.New[verbs.ExpDeviceAttr]()
	if err != nil {
		return err
	}
	defer cmem.Free(attr)
	if err := verbs.ExpQueryDevice(ctx, attr); err != nil {
		return err
	}
	for _, c := range []struct {
		what, limit, flag string
		need, max         int
	}{
		{"send queue", "max_qp_wr", "-max-wr", 2 * rounds, int(attr.MaxQPWR)},
		{"receive queue", "max_qp_wr", "-max-wr", rounds, int(attr.MaxQPWR)},
		{"receive CQ", "max_cqe", "-max-cqe", rounds, int(attr.MaxCQE)},
	} {
		if c.need > c.max {
			return &LimitError{Rounds: rounds, What: c.what, Need: c.need, Limit: c.limit, Max: c.max, Flag: c.flag}
		}
	}
	return nil
}

// side is one end: its QP, CQs, buffers and schedule.
type side struct {
	qp        *verbs.QP
	scq, rcq  *verbs.CQ
	send, rcv *lease.Buffer // rounds × size bytes each
	mr        [2]*verbs.MR
	list      *task.List
}

func run(rounds, size int, limits softdev.Limits, out io.Writer) (err error) {
	if rounds <= 0 || size <= 0 {
		return errors.New("rounds and size must be positive")
	}
	dev, err := softdev.Open(softdev.MaxQPWR(limits.MaxQPWR), softdev.MaxCQE(limits.MaxCQE))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	if err := checkLimits(dev.Context(), rounds); err != nil {
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer dev.DeallocPD(pd)

	var ping, pong side
	for _, s := range []*side{&ping, &pong} {
		if err := s.open(dev, pd, rounds, size); err != nil {
			return err
		}
		defer s.close(dev)
	}
	if err := device.ConnectPair(ping.qp, pong.qp); err != nil {
		return err
	}
	// The message of round i is i+1 repeated.
	for i := 0; i < rounds; i++ {
		msg := ping.send.Bytes()[i*size : (i+1)*size]
		for j := range msg {
			msg[j] = byte(i + 1)
		}
	}
	ctx := dev.Context()
	for _, s := range []*side{&ping, &pong} {
		s.list, err = task.New(ctx, task.Capacity{Tasks: 2, SendWRs: 2 * rounds, RecvWRs: rounds, SGEs: 2 * rounds})
		if err != nil {
			return err
		}
		defer s.list.Free()
		s.list.RecvTask(s.qp)
		for i := 0; i < rounds; i++ {
			if _, err := s.list.Recv(uint64(i), s.sge(s.rcv, i, size, 1)); err != nil {
				return err
			}
		}
		s.list.SendTask(s.qp)
	}
	for i := 0; i < rounds; i++ {
		// ping: send round i, then wait for its pong before the next.
		if _, err := ping.list.Send(uint64(i), 0, ping.sge(ping.send, i, size, 0)); err != nil {
			return err
		}
		if _, err := ping.list.Wait(uint64(rounds+i), verbs.ExpSendWaitEnLast, ping.rcq, 1); err != nil {
			return err
		}
		// pong: wait for ping i, send back the buffer it arrived in.
		if _, err := pong.list.Wait(uint64(rounds+i), verbs.ExpSendWaitEnLast, pong.rcq, 1); err != nil {
			return err
		}
		if _, err := pong.list.Send(uint64(i), 0, pong.sge(pong.rcv, i, size, 1)); err != nil {
			return err
		}
	}
	// The whole exchange: two posts, then the device runs it.
	start := time.Now()
	if err := pong.list.Post(); err != nil {
		return err
	}
	if err := ping.list.Post(); err != nil {
		return err
	}
	executed, err := dev.Progress()
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("the schedule did not finish (QP %#x is ping, %#x pong): %w", ping.qp.QPNum, pong.qp.QPNum, err)
	}
	for _, s := range []*side{&ping, &pong} {
		got, err := drain(s.rcq, rounds)
		if err != nil {
			return err
		}
		if got != rounds {
			return fmt.Errorf("%d receive completions, want %d", got, rounds)
		}
	}
	if !bytes.Equal(ping.rcv.Bytes(), ping.send.Bytes()) {
		return errors.New("the pongs differ from the pings")
	}
	fmt.Fprintf(out, "%d round trips of %d bytes: one post per side, %d work requests run by the device in %v, %.3f µs per round trip, data verified\n",
		rounds, size, executed, elapsed.Round(time.Microsecond), float64(elapsed.Nanoseconds())/1e3/float64(rounds))
	return nil
}

func (s *side) open(dev *softdev.Device, pd *verbs.PD, rounds, size int) error {
	var err error
	// Sends and waits are unsignaled: the send CQ only ever sees errors.
	if s.scq, err = dev.CreateCQ(16, device.CrossChannelCQ()); err != nil {
		return err
	}
	// Every receive's CQE stays until the end: the CQ holds them all.
	if s.rcq, err = dev.CreateCQ(rounds, device.CrossChannelCQ()); err != nil {
		return err
	}
	caps := device.Caps{SendWR: 2 * rounds, RecvWR: rounds, SendSGE: 1, RecvSGE: 1}
	if s.qp, err = dev.CreateQP(pd, s.scq, s.rcq, device.CrossChannel(), device.QPCaps(caps)); err != nil {
		return err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	for i, b := range []**lease.Buffer{&s.send, &s.rcv} {
		if *b, err = lease.Alloc(rounds * size); err != nil {
			return err
		}
		if s.mr[i], err = dev.RegMR(pd, (*b).Bytes(), access); err != nil {
			return err
		}
	}
	return nil
}

func (s *side) close(dev *softdev.Device) {
	dev.DestroyQP(s.qp)
	dev.DestroyCQ(s.scq)
	dev.DestroyCQ(s.rcq)
	for i, b := range []*lease.Buffer{s.send, s.rcv} {
		if s.mr[i] != nil {
			dev.DeregMR(s.mr[i])
		}
		if b != nil {
			b.Free()
		}
	}
}

// sge names message i of b, registered as s.mr[mr].
func (s *side) sge(b *lease.Buffer, i, size, mr int) verbs.SGE {
	return verbs.SGE{Addr: b.Addr() + uint64(i*size), Length: uint32(size), Lkey: s.mr[mr].Lkey}
}

// drain polls cq until it is empty and checks every completion succeeded.
func drain(cq *verbs.CQ, max int) (int, error) {
	wc := make([]verbs.ExpWC, 64)
	total := 0
	for {
		n, err := verbs.ExpPollCQ(cq, wc)
		if err != nil {
			return total, err
		}
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess {
				return total, fmt.Errorf("wr_id %d completed with %v", c.WRID, c.Status)
			}
		}
		total += int(n)
		if n == 0 || total > max {
			return total, nil
		}
	}
}
