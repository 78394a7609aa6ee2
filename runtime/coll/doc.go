// Package coll runs collectives on the NIC: barrier, allreduce,
// broadcast and allgather as standing CORE-Direct (cross-channel)
// schedules over the experimental verbs, for an HCA (MLNX_OFED's
// ibv_exp_post_task) and for runtime/softdev alike.
//
// A standing schedule is one rank's part of a collective built once
// into a task list (runtime/task) over memories leased for its life
// (runtime/lease): every receive, send, reduction, enable and wait of
// one run, in the order the device must run them. Each run is then one
// ibv_exp_post_task on each rank and one completion to poll; the device
// moves the data and does the arithmetic (CALC sends) from step to step
// without the CPU, and posting again allocates and rebuilds nothing.
//
// # The flow
//
// Every rank (on an HCA: every process) creates its communicator with
// New, giving the size, its rank and an Exchange: the caller's
// all-gather of byte strings (MPI_Allgather, PMIx, a key-value store;
// coll ships InProcess for ranks that are goroutines of one process,
// and FromEnv for processes a launcher started: PMIx through package
// pmix under mpirun or srun --mpi=pmix, else the TCP rendezvous of
// package rendezvous). New queries the device and port, creates the queues,
// describes them in an Endpoint, trades endpoints through the exchange,
// connects every queue pair to its peer's and, in a second round of the
// exchange, waits until every rank has connected (so a Post may follow
// at once). Then Register makes memory (a lease.Buffer) usable by the
// collectives; Barrier, Allreduce, Broadcast and Allgather build
// schedules over it; Post starts a run, Test polls for its end once and
// Wait polls until it; the caller reads the results, writes the next
// inputs and posts again. Close on schedules, memories and the
// communicator releases everything. Per rank, as Example runs it:
//
//	ctx, exchange := dev.Context(), world.For(rank)
//	c, err := coll.New(ctx, rank, size, exchange, coll.Options{}) // QPs created, endpoints exchanged, QPs connected
//	check(err)
//	buf, err := lease.Alloc(coll.ElementSize) // one element: value and location, big-endian
//	check(err)
//	mem, err := c.Register(buf)
//	check(err)
//	sum, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint) // built once, in place
//	check(err)
//	for run := range 3 {
//		coll.PutElement(mem.Bytes(), 0, uint64(10*run+rank), 0) // this run's input
//		check(sum.Post())                                       // one ibv_exp_post_task
//		check(sum.Wait())                                       // polls until the run's completion
//		v, _ := coll.Element(mem.Bytes(), 0)
//		results[rank] = append(results[rank], v)
//	}
//	check(sum.Close())
//	check(mem.Close())
//	check(buf.Free())
//	check(c.Close()) // a *coll.LeakError if a schedule or memory was left open
//
// A communicator's methods may be called from several goroutines, but
// one run is in flight at a time on a rank (as with MPI's blocking
// collectives): post the next, of any schedule, once Wait or Test has
// reported the last complete. A schedule's Post, Test and Wait may be
// called from several goroutines too (they run under the communicator's
// lock), and across Close, which abandons a run in flight: they then
// return ErrClosed. A copy of a Comm, Schedule or Memory is the same
// object. With softdev, package collsoft builds all ranks of a World on
// one device and one goroutine can drive them: post every rank's run,
// then Wait each.
//
// # The algorithms
//
// Barrier is the dissemination barrier (ceil(log2 N) steps of empty
// messages). Allreduce is recursive doubling over p, the largest power
// of two not above N; each of the N-p extra ranks hands its elements to
// rank r-p first and gets the result back at the end, so any N works.
// Each step's message is a CALC send whose operands are the rank's input,
// its extra rank's and the partials received so far, so no partial
// result is ever stored by the CPU; the total is one more CALC the rank
// sends itself. Broadcast is a binomial tree from any root, Allgather
// Bruck's algorithm in place (without the final rotation). Every one of
// them talks only to the ranks at distance ±2^j (mod N), so a rank has
// at most 2·ceil(log2 N) peer queue pairs, whatever the collective.
//
// # The queues
//
// Each rank has a manager: a QP created CROSS_CHANNEL and connected to
// itself, whose send CQ is the rank's completion CQ. Each peer gets an
// RC QP created CROSS_CHANNEL|MANAGED_SEND, with its own receive CQ and
// a send CQ shared by all peers. A schedule is one task list: the run's
// receives on every peer QP (posted with the run, so they wait for their
// messages), its sends on every peer QP (posted, but held: the QPs are
// managed; the last one per QP and run signaled), and the manager's
// program. That walks the collective: each send of a step is released by
// a SEND_ENABLE, each step waits with a CQE_WAIT on the receive CQ of
// the peer it hears from, and reductions and sends to itself run on the
// manager directly. Every enable and wait carries WAIT_EN_LAST, so it
// moves its queue's or CQ's base past itself and counts stay relative to
// the run, which is what lets the same list be posted again. After the
// last step the manager waits for the send CQ (every peer QP's sends are
// complete, so the buffers may be reused), then for its own completion
// CQ to hold one completion per signaled wait of the run: the done wait,
// the run's one completion. A schedule that lost a wait could never
// complete, since the done wait counts every wait the schedule has; with
// collsoft that is reported as a deadlock naming the rank, the QP and
// the count, never a hang. A last, unsignaled wait consumes the done
// completion so the next run counts from there.
//
// Ranks also trade ready messages (ready.go): a run's task list posts its receives, then a
// zero-length SEND on a plain RC "ready" QP to every peer it receives
// from, and the manager waits for the peer's ready message before its
// first SEND_ENABLE to that peer. A send therefore never reaches a peer
// before the peer's receives are posted: no RNR NAK, whose timer
// (min_rnr_timer 12: 0.64 ms) would otherwise be what a rank a few
// microseconds late costs its neighbors every run; a late rank costs
// what it is late plus one message. The ready receives are posted one
// run ahead. Ranks of one device run by Options.Progress (collsoft) skip
// them: that loopback never NAKs.
//
// Test is one C call: it polls the completion CQ for the run's
// completions, ending with the done wait's, and then drains every other
// CQ the run fed, comparing what each held with the exact count the
// schedule produces. A completion with an error status or a wrong count
// is a *RunError naming the rank, the CQ, the QP and the status; the
// communicator is then broken (its queues are in an unknown state) and
// refuses further posts.
//
// # Faults
//
// A run never waits for ever on a lost rank. Each rank also has a plain
// RC watch QP per neighbor (watch.go): once a run is 250 ms old, Test
// probes every neighbor with a zero-length RDMA WRITE, which a live
// neighbor's device acknowledges whatever its CPU is doing; a dead or
// unreachable one's ends in IBV_WC_RETRY_EXC_ERR after the QP's retries
// (timeout 14, retry_cnt 7: about 0.54 s), and the run fails with a
// *PeerLostError naming it. A rank whose run failed tells its neighbors
// which rank was lost (a SEND with immediate data on the watch QPs), so
// the loss of one rank ends the run on every rank, each naming it
// (measured across 2 to 8 processes, the last one killed mid-allreduce:
// every survivor's Wait returned within 0.1-0.85 s). A send of the run
// itself that runs out of retries (IBV_WC_RETRY_EXC_ERR) on the QP to a
// neighbor says the same: a *PeerLostError naming it, which wraps the
// *RunError naming the QP. Any other error completion on a collective's
// own QP (a flush, a remote error) is a *RunError naming the QP and the
// peer rank it connects to. After
// either, the communicator refuses further posts: close it. A rank that
// never arrives is the exchange's to report (FromEnv's: New fails at the
// round's deadline, naming the rank).
//
// # Elements
//
// Allreduce reduces elements of ElementSize (16) bytes, the device's
// calc operand: a big-endian 64-bit value, then a big-endian 64-bit
// location that only MAXLOC reads and writes (the largest value and its
// location; the smallest location among equal values). PutElement and
// Element write and read them: INT as uint64(v), FLOAT through
// math.Float64bits. The operations and types are those the device
// reports in its calc capabilities (ibv_exp_query_device), plus MAXLOC on
// UINT, which the mlx4 and mlx5 providers accept without reporting it;
// a maximum of signed or floating values runs as UINT MAXLOC over an
// order-preserving encoding of them (examples/allreduce shows one).
//
// # Misuse
//
// Mistakes get errors that say what to change, wrapping syscall errnos:
// a memory smaller than the collective needs (EINVAL, with both sizes),
// an op or type the device cannot reduce (EOPNOTSUPP, with its
// capabilities), more work per run than Options.Depth allows (EINVAL),
// ranks on devices that share no fabric, such as two softdev devices
// (ErrOtherDevice), a Post while a run is in flight on the rank
// (ErrInFlight), anything on a closed communicator (ErrClosed), a
// Memory closed while a schedule uses it (EBUSY), endpoints the
// exchange garbled or mixed up (ErrBadEndpoint and messages naming the
// rank), and endpoints that contradict each other (ErrConflict, naming
// the ranks): two ranks, or one twice, claiming one queue pair (its port
// address and number), or ranks that received different endpoints, which
// New's second round compares by digest. A lying or confused peer thus
// fails New on every rank instead of leaving a contribution out. Close reports the schedules and memories the caller left open
// as a *LeakError, after closing them.
//
// # On an HCA
//
// The same code runs on an HCA; what differs is around it. Each rank is
// a process with its own device context, and the exchange is the job's
// (FromEnv's PMIx or TCP rendezvous, or MPI_Allgather): New calls it
// twice, so it must keep rounds apart. Leave Options.Progress nil: Wait then polls until the run is
// complete, WaitContext until a deadline (softdev needs no more either, since its polls run the
// device; collsoft sets Progress only to turn a deadlock into an error).
// Draining every CQ a run fed, every run, matters on mlx4 and mlx5:
// their providers free send and receive queue slots only when the
// completions are polled, and softdev does the same, so a schedule that
// forgot a CQ fails at Post with ENOMEM within a few runs here too. The QPs are connected
// with real RC attributes (the port's LID or GID, the smaller active
// MTU, random PSNs, timeout 14, retry_cnt 7) and rnr_retry 7, which
// retries for ever: a peer that has not posted this run's receives yet
// is late, not gone (ready messages keep it from drawing an RNR NAK in
// the first place). Wait polls in three phases: a few polls
// back to back, then polls that sched_yield until the run is 1 ms old
// (an oversubscribed host's other ranks need the core), then naps of 5
// to 50 µs.
package coll
