// Package softdev is a software verbs device with Mellanox cross-channel
// ("CORE-Direct") semantics. It lives in the calling process, so tests and
// CI can run task lists without an HCA or libibverbs. It follows the
// hardware: the rules below are those the vendor's CORE-Direct test-suite
// (libibverbs 1.2.1mlnx1) and its providers (libmlx4, libmlx5) show, and
// where the manual pages say otherwise, they win. A schedule that runs
// here runs the same way on an HCA, and one that deadlocks here would
// hang there.
//
// # How it plugs in
//
// Open builds a provider context the way a verbs provider lays one out:
// a struct verbs_context_exp directly in front of a struct verbs_context
// whose last member is the struct ibv_context handed out by
// Device.Context. Both dispatch tables (ibv_context.ops and the exp
// record) point into this package's C code. The generated wrappers in
// package verbs therefore run the headers' real inline code and reach the
// device through the same lookups as with hardware: verbs.ExpPostTask
// reaches lib_exp_post_task, verbs.ExpPostSend drv_exp_post_send,
// verbs.PostSend and verbs.PostRecv ops.post_send and ops.post_recv,
// verbs.PollCQ ops.poll_cq, verbs.ExpPollCQ drv_exp_ibv_poll_cq, and
// verbs.ExpCreateCQ, ExpModifyCQ, ExpCreateQP, ExpModifyQP and
// ExpQueryDevice their exp entries.
//
// The exported verbs (ibv_alloc_pd, ibv_reg_mr, ibv_create_cq,
// ibv_modify_qp, ibv_query_port, ibv_get_async_event, …) live in
// libibverbs, which this device does not need: it supplies them itself
// (front_go.c). The first Open registers each with dynlib.Provide for
// the legacy verbs ABI (a program that opens none has no stand-in between
// it and the library: see package launch for softdev behind the vendor's
// libibverbs), so the generated wrappers (verbs.AllocPD,
// verbs.CreateCQ, verbs.ModifyQP, verbs.QueryPort, verbs.GetAsyncEvent,
// …) find them before any library, and so do the generated stubs the
// headers' inline verbs call (verbs.IbvQueryPort reaches ibv_query_port,
// a PD-only verbs.ExpCreateQP ibv_create_qp). Each does what legacy
// libibverbs does when its argument is an object of an open device of
// this package, recognised by address among the devices' objects (never
// by reading it): the context's ops plus the library's bookkeeping
// (ibv_create_cq fills in the CQ's context, cq_context, counters, mutex
// and cond; ibv_ack_async_event adds to the CQ's async_events_completed
// or the QP's events_completed; ibv_reg_mr checks the range as RegMR
// does; ibv_close_device closes the Device). Anything else goes to the
// library's own function, resolved then and refused, like the generated
// package's lookups, unless the library is MLNX_OFED's legacy one: on a
// machine without it, or with upstream rdma-core's, such a call fails
// with ENOSYS instead of crashing. So an application written against the
// verbs runs here unchanged, with or without a libibverbs installed.
// Completion channels (ibv_create_comp_channel, ibv_get_cq_event,
// ibv_ack_cq_events, ibv_destroy_comp_channel), address handles
// (ibv_create_ah, ibv_destroy_ah) and shared receive queues
// (ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_destroy_srq, which
// the generated package does not wrap: Device.CreateSRQ and its siblings
// run the same code) are supplied the same way. What the device does not
// have fails cleanly: P_Key queries with EOPNOTSUPP, ibv_resize_cq
// with ENOSYS (libibverbs' answer for a provider without resize);
// ibv_query_qp reports the state, the destination, the access flags,
// the capacities and the init attributes (what modify_qp ignores reads
// 0). Calls in flight on a device finish before Close frees it; a
// blocked ibv_get_async_event returns -1 with ECANCELED, and any verb
// given a closed device's context or objects fails with ENODEV (it is
// never forwarded to the library). A Device is a device of the
// runtime's resource layer (it embeds a *device.Device): AllocPD, RegMR,
// CreateCQ, CreateQP, QueryPort, Endpoint, WaitCQ, … go through the
// generated verbs as on an HCA, and device.Connect and
// device.ConnectPair connect its QPs; the methods only a software device
// has (ModifyQP, GetAsyncEvent, the SRQ verbs, …) run the same code as
// the verbs. Devices are not listed by ibv_get_device_list: Open is how
// one is made, or device.Open("softdev") ($VERBSEXP_DEVICE=softdev),
// which opens one that runs by itself (Autonomous), for a program that
// imports this package and otherwise runs on an HCA.
//
// # The C, in layers
//
// The device is C in layers, a header each, whose #include lines only
// point down (TestLayers checks them):
//
//   - The engine (engine.h, with the device's record): engine_objects.c
//     has the context, the dispatch tables, the objects and the QP state
//     machine, the asynchronous events, open and close; engine_post.c the
//     post path; engine_exec.c execution, the CORE-Direct rules, CQs and
//     polling; engine_dma.c the DMA checks, calc and the atomics.
//   - The transport, below one seam (transport.h: its packets, links,
//     per-QP state and its record of a device, the port; the engine's
//     records it works on in place, the WQEs, queues and QPs; and the
//     calls each way, down with the port, up with the device, which the
//     transport sees only as a handle: TestSeam checks it):
//     transport_rc.c has the RC, UC and UD packet rules, transport_link.c
//     the links a packet takes, transport_wire.c the TCP wire between
//     devices and the transport thread.
//   - Two thin front ends on top: the Go device (this package's Go files
//     and front_go.c, front_go.h: the exported verbs libibverbs would
//     supply) and the libibverbs driver (driver/driver.c, which package
//     launch builds with the engine's and the transport's files into
//     libsoftdev-rdmav2.so, with no Go inside).
//
// Through the driver a device is opened once per process: each
// ibv_open_device makes an engine of its own in the library's context
// record, and two engines of one device would number their QPs alike and
// share its listener, so a SEND from one context to the other's QP would
// land in the sender's own receive queue (an HCA keeps QP numbers unique
// across a device's contexts). A second ibv_open_device of a device whose
// context is open in the process therefore fails with EBUSY, saying so
// on stderr; open it once and share the struct ibv_context (a child
// after fork may open it again). Closing the context makes way for the
// next open.
//
// cgo compiles only the C files of the package's own directory, so the
// layers are flat files named by their prefix.
//
// # Objects
//
// A schedule's objects and the verbs on them, as Example runs it:
//
//	d, err := softdev.Open()
//	if err != nil {
//		log.Fatal(err) // it says why: an address or a port taken (and by whom), no file descriptors, …
//	}
//	pd, _ := d.AllocPD()
//	buf, _ := lease.Alloc(4096) // C memory, registered below
//	mr, _ := d.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
//	cq, _ := d.CreateCQ(16) // 32 slots: 16 rounded up to a power of two above it
//	mgr, _ := d.CreateQP(pd, cq, cq, device.CrossChannel())
//	a, _ := d.CreateQP(pd, cq, cq, device.ManagedSend())
//	b, _ := d.CreateQP(pd, cq, cq)
//	device.ConnectPair(a, b)     // RESET -> INIT -> RTR -> RTS, each with the other's qp_num
//	device.ConnectPair(mgr, mgr) // a QP may be connected to itself
//
//	sge, _ := cmem.Slice[verbs.SGE](2)
//	sge[0] = verbs.SGE{Addr: buf.Addr(), Length: 8, Lkey: mr.Lkey}
//	sge[1] = verbs.SGE{Addr: buf.Addr() + 64, Length: 8, Lkey: mr.Lkey}
//	recv, _ := cmem.New[verbs.RecvWR]()
//	*recv = verbs.RecvWR{WRID: 1, SGList: &sge[1], NumSGE: 1}
//	wrs, _ := cmem.Slice[verbs.ExpSendWR](2)
//	wrs[0] = verbs.ExpSendWR{WRID: 2, SGList: &sge[0], NumSGE: 1, ExpOpcode: verbs.ExpWRSend,
//		ExpSendFlags: uint64(verbs.ExpSendSignaled)}
//	wrs[1] = verbs.ExpSendWR{WRID: 3, ExpOpcode: verbs.ExpWRSendEnable,
//		ExpSendFlags: uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)}
//	wrs[1].Task.WQEEnable().QP, wrs[1].Task.WQEEnable().WQECount = a, 1
//	fmt.Println(verbs.PostRecv(b, recv, nil))         // the peer's receive
//	fmt.Println(verbs.ExpPostSend(a, &wrs[0], nil))   // held: a is managed
//	fmt.Println(verbs.ExpPostSend(mgr, &wrs[1], nil)) // releases it
//	wc, _ := cmem.Slice[verbs.ExpWC](4)
//	for got := 0; got < 3; { // completions come microseconds after the post, as an HCA's: poll until they do
//		n, _ := verbs.ExpPollCQ(cq, wc) // runs the device
//		for _, c := range wc[:n] {
//			fmt.Println(c.WRID, c.Status, c.ExpOpcode)
//		}
//		got += int(n)
//	}
//
//	cmem.FreeSlice(sge)
//	cmem.Free(recv)
//	cmem.FreeSlice(wrs)
//	cmem.FreeSlice(wc)
//	d.DestroyQP(mgr)
//	d.DestroyQP(a)
//	d.DestroyQP(b)
//	d.DestroyCQ(cq)
//	d.DeregMR(mr)
//	buf.Free()
//	d.DeallocPD(pd)
//	fmt.Println(d.Close()) // a *LeakError if something was left
//
// (examples/tasklist builds one with a task list.) QPs are RC
// (the default), UC or UD (device.Transport): RC and UC connected to
// a QP of the same device (loopback) or of another device, in this
// process or another, on this host or another (see The network device),
// UD addressed per work request with an address handle. UC is RC without
// acknowledgements: the requester completes a WQE when its last packet
// is out, and the responder drops a message it cannot take whole (a PSN
// gap, no receive WQE, an access or length error), silently. UD sends
// datagrams of up to the port's MTU to the QP and Q_Key each WR names;
// each receive buffer starts with the 40-byte GRH area (written when the
// datagram had a GRH: IBV_WC_GRH), byte_len counts it, and the
// completion names the source QP (and LID, on an InfiniBand port). A QP
// created with device.SRQ takes its receives from a shared receive
// queue, a WQE at a message's first packet, completing in any order
// among its QPs; an armed limit raises IBV_EVENT_SRQ_LIMIT_REACHED, and a
// QP in error raises IBV_EVENT_QP_LAST_WQE_REACHED once its flush is
// done. Port 1 is a RoCE port (an InfiniBand one with the InfiniBandPort
// option): link layer Ethernet, LID 0, one GID (index 0: the device's IP
// address), its active MTU the largest IB MTU its interface's MTU holds;
// the node GUID
// (ibv_query_device) is random, so devices of different processes do not
// share one. QP numbers
// start at 0x100 and MR keys are derived from a slot and a generation,
// with lkey != rkey, so a stale or mistyped key is caught. Destroying a
// PD, CQ or QP still in use (by MRs or QPs, or by a pending CQE_WAIT or
// ENABLE naming it) fails with EBUSY. A PD, MR, CQ or QP that is not a
// live object of this device (nil, destroyed, another device's, a copy
// of one's struct) is refused with EINVAL by every method and every verb
// that reaches the provider (an object is found by its address among the
// device's own, or a QP through the qp_num its struct ibv_qp holds, before
// anything else of it is read): destroyed CQs and QPs keep their records
// (not their rings), so a stale handle reads valid memory and fails
// cleanly.
// Each method looks its object up and uses it under one hold of the
// device's lock (the layer's methods under the layer's, which also keeps
// what it created), so the same object freed or destroyed from several
// goroutines at once is freed once (the others get EINVAL), and Close
// from several goroutines closes once (the others get ErrClosed). A nil
// *Device (what a failed Open returns) gives ErrNilDevice from every
// method; nil options are skipped. Once Close has started, Context() is
// nil, which every generated wrapper refuses. A context, PD, MR, CQ or
// QP pointer kept from before Close stays safe to pass: the records
// outlive the device (a tombstone of about 1.5 KB per device plus each
// object's record, for the life of the process), and every verb on them,
// the headers' inline ones included (verbs.PostSend, verbs.PollCQ,
// verbs.ExpPostTask, …, which reach the device without the Device),
// fails with ENODEV, whatever the interleaving with Close.
//
// Sizes are checked against the C fields before anything is truncated:
// CreateCQ refuses a cqe outside 1..MaxInt32 and Caps fields outside
// uint32, with EINVAL. The device's max_qp_wr and max_cqe (DefaultLimits;
// Open's MaxQPWR and MaxCQE options change them, up to 1<<24) bound the
// queues and CQs, also with EINVAL, as an HCA's provider does; Limits and
// ibv_exp_query_device report them.
//
// RegMR checks, as an HCA pinning the pages would, that the whole range is
// mapped memory the device may read (and write, for an MR with any write
// access): it reads /proc/self/maps once and needs contiguous mappings
// with those permissions from the first byte to the last, which is exact
// and costs a few microseconds; without /proc it falls back to msync(2)
// (mapping only). Otherwise registration fails with EFAULT, naming the
// first byte that is not. The check is the engine's (sd_check_mapped in
// engine_dma.c): the exported ibv_reg_mr and the driver's reg_mr under
// softdev exec make it too, so unmapped memory, a read-only mapping
// registered for writing or a length past the buffer is EFAULT there as
// on an HCA. The memory must then stay valid and unmoved
// until DeregMR: C memory (package lease, runtime/cmem), or Go
// memory pinned by the caller; a device writing into memory freed or
// unmapped while still registered corrupts or faults, as a DMA into it
// would. WRs, tasks and SGE lists handed to the verbs should be C memory
// too (Go's cgo pointer rules). Like any provider, the post path reads
// what they point at (the WR, num_sge SGEs at sg_list, an inline
// payload) with the CPU: those pointers must be valid, they cannot be
// checked; what an SGE or a remote range names is checked against the
// MRs when the WQE executes, and an access outside them is an error
// completion that touches nothing.
//
// Once DeregMR returns, the device never touches the MR's memory again,
// messages in flight included, so it may be unmapped at once: like an
// HCA, which translates every packet through the key, the device checks
// the keys and ranges at every packet a message places or reads, not
// only at its first. The rest of an RDMA WRITE into an MR deregistered
// since its first packet is a remote access error (the responder NAKs
// it and goes to the error state with IBV_EVENT_QP_ACCESS_ERR); a SEND
// whose receive WQE's MR went completes that WQE with
// IBV_WC_LOC_PROT_ERR (the requester gets IBV_WC_REM_OP_ERR, as when
// the SGE fails at the first packet); a send WQE whose MR went before a
// later burst of its message or a retransmission, and a READ or an
// atomic whose MR went before its response, complete with
// IBV_WC_LOC_PROT_ERR. Nothing of such a message is placed or sent after
// the deregistration.
//
// # Post path
//
// Every post does its work at once: each WR is checked and built into a
// 64-byte WQE in the QP's send or receive ring, its SGEs copied to a side
// table (max_sge per slot) and an IBV_SEND_INLINE payload to an inline
// area (max_inline_data per slot; its lkey is not checked). Nothing keeps
// a pointer to the caller's WRs, SGE arrays or inline buffers, so they
// can be reused as soon as the call returns; data buffers are read or
// written when the WQE executes. Errors found at post time return the
// errno with *bad_wr set to the failing WR, the WRs before it staying
// posted; a refused WR changes nothing (no base moves):
//
//   - ENOMEM: the ring is full: max_send_wr / max_recv_wr of its slots
//     are taken (see below: a slot is freed by polling, not by executing).
//   - EINVAL: a send to a QP not in RTS (or ERR); more SGEs than max_sge;
//     an opcode the device does not simulate (memory windows, UMR, TSO,
//     masked atomics); an unknown send flag; an inline payload over
//     max_inline_data; comp_mask bits; a negative count; a CQ or QP that
//     is not a live one of this device; and the cross-channel refusals
//     of rules 1, 2 and 4 and the calc ones below.
//
// A send WR's comp_mask must be 0 (verbs_exp.h defines no bit of it).
// This device refuses any other value with EINVAL, where MLNX_OFED's
// mlx5 provider ignores the field: stricter on purpose, since a WR left
// partly uninitialised works on an HCA only by luck. The first such
// refusal on a device says so on stderr, naming the verb, the WR's
// index in its list (and the task's, for ibv_exp_post_task), its wr_id
// and the value ("softdev: ibv_exp_post_send: work request 1, wr_id 11,
// has comp_mask 0x4: EINVAL …"); zero each WR (memset, or = {0}) before
// filling it in. docs/errors.md lists it with the other refusals.
//
// IBV_EXP_SEND_WAIT_EN_LAST on an opcode other than CQE_WAIT and the
// enables is ignored, as mlx4 and mlx5 ignore it.
//
// A slot stays taken from the post that fills it until a polled
// completion frees it; executing its WQE does not. That is how mlx4 and
// mlx5 count: their post verbs compare the queue's head with a tail that
// only their poll_cq moves. A polled send CQE frees the slot of its WQE
// and of every WQE before it in that send queue, the unsignaled ones
// included; a polled receive CQE (a flushed one too) frees one receive
// slot. A CQE nobody polls frees nothing: one left in a CQ that only
// CQE_WAIT reads, one written over in a CQ that ignores overruns, one
// lost to an overrun. So a send queue takes max_send_wr WRs over its
// whole life unless CQEs of its own are polled, however long the device
// runs, and then every post fails with ENOMEM; a standing schedule must
// poll every CQ it feeds on every run (runtime/coll drains them all). A
// slot is not written again before it is freed, so a WQE stays intact
// until then. Moving a QP to RESET frees every slot; CQEs of WQEs from
// before the RESET still in a CQ free nothing when polled. QPStats
// reports, per queue, the position below which slots are free
// (QueueStats.Freed).
//
// Receives may be posted in any state, RESET included (mlx4 and mlx5 do
// not check; the vendor's tests post them before INIT); moving a QP to
// RESET discards every WQE it holds.
//
// ibv_exp_post_task walks the task list in order and posts each task's
// WR list to its QP's send (IBV_EXP_TASK_SEND) or receive
// (IBV_EXP_TASK_RECV) queue, all under one hold of the device lock. The
// first failure stops the walk: the errno is returned and *bad_task names
// the task; WRs posted before it (in earlier tasks and earlier in the
// same list) stay posted and run. The verbs API cannot say which WR of
// that task failed; Device.TaskFailure reports it. A task list whose
// next pointers loop back is refused whole with EINVAL before anything
// is posted, *bad_task naming the task whose next closes the loop (a WR
// list that loops is posted until the ring fills: ENOMEM).
//
// # The cross-channel rules
//
// A manager is a QP created with IBV_EXP_QP_CREATE_CROSS_CHANNEL
// (device.CrossChannel); its send queue may hold CQE_WAIT, SEND_ENABLE
// and RECV_ENABLE work requests, which coordinate other queues. A
// managed queue is a send queue created with MANAGED_SEND
// (device.ManagedSend) or a receive queue created with MANAGED_RECV
// (device.ManagedRecv).
//
//  1. The posting QP must be cross-channel: CQE_WAIT, SEND_ENABLE,
//     RECV_ENABLE, and any WR with IBV_EXP_SEND_WITH_CALC, posted to a QP
//     created without CROSS_CHANNEL fail with EINVAL.
//  2. The target must be managed: SEND_ENABLE names a QP created with
//     MANAGED_SEND, RECV_ENABLE one with MANAGED_RECV; otherwise EINVAL at
//     once, from any QP, the target itself included.
//  3. A managed send queue accepts WRs and runs none of them until a
//     SEND_ENABLE executed elsewhere releases them; an enable posted into
//     a managed queue (even one of that queue) is held with the rest. A
//     managed receive queue's WQEs, those posted before the QP was
//     connected included, take no data until a RECV_ENABLE releases them;
//     a send arriving meanwhile waits, an RNR retry that never gives up.
//  4. Enable counts are relative to the queue's enable base, 0 when the
//     queue is created (or reset). An enable with wqe_count N > 0 releases
//     the queue up to base + N; N = 0 releases every WQE posted to the
//     queue when the enable is posted (a snapshot: later ones wait). The
//     queue remembers the largest release beyond the base since the base
//     last moved, and only an enable carrying IBV_EXP_SEND_WAIT_EN_LAST
//     moves the base, to there; enables without it share one base. So
//     with 10 sends posted, three SEND_ENABLE(2) each with WAIT_EN_LAST
//     release 6; the same three with WAIT_EN_LAST on the last only
//     release two. An enable that would release WQEs not yet posted
//     fails (EINVAL).
//     All of this is computed when the enable is posted, as the mlx4 and
//     mlx5 providers compute the index they write into the WQE.
//  5. Wait counts are relative too. Each CQ has a wait base, 0 when it is
//     created. CQE_WAIT with cq_count N holds the manager's send queue
//     until the CQ has produced base + N CQEs since its creation, polled
//     or not, from any QP (the QP feeding the CQ need not be
//     cross-channel). The CQ remembers the largest count since its base
//     last moved, and a wait with WAIT_EN_LAST moves the base by it;
//     chained waits without it share one base. Waits of 9, 10 and 11 on
//     one CQ, the last with WAIT_EN_LAST, all signaled: after 10 CQEs the
//     first two complete and the third never does.
//  6. Bases live on the target CQ or queue: every manager posting to it
//     shares them.
//  7. A manager runs its WRs strictly in order: an unmet wait blocks
//     everything behind it; it never fails and never completes.
//  8. An enable or a wait produces a CQE on the manager's send CQ only if
//     it is signaled (or the QP signals all): IBV_WC_SUCCESS, opcode
//     IBV_WC_SEND, its own wr_id and the manager's qp_num, in post order;
//     each wait of a chain completes on its own when met. A wait on the
//     manager's own CQ can be met by the manager's earlier CQEs.
//  9. CROSS_CHANNEL alone changes nothing for SEND and RDMA: a QP
//     completes exactly the WQEs it may run, in order, with their wr_ids.
//  10. ibv_exp_post_task posts tasks in list order and stops at the first
//     failure, as described above.
//
// # Execution
//
// Nothing executes during a post on a device that runs by polls (the
// default, until a QP connects to another device; see The network
// device for who runs it then). The device runs in Progress and at the
// start of every poll (so polling alone drives a schedule, its
// completions showing at the polls after: see Completions as an HCA's);
// once it has run to quiescence, polls skip the run until something is
// posted or changed. A run is a
// sequence of rounds; each round visits the QPs in creation order and
// lets each execute (or flush) at most the one WQE at the head of its send
// queue; rounds repeat until one makes no progress. Everything happens
// under one device mutex (posts from several goroutines are serialized),
// so the outcome depends only on the order of the calls on the device:
// the same calls give the same completions in the same order (which
// poll finds them depends on time, unless SyncCompletions).
//
// A send WQE may run when it is posted and, on a managed send queue,
// released. It executes as follows; success completes only if it was
// signaled (IBV_EXP_SEND_SIGNALED, or sq_sig_all), errors always complete
// and move the QP to the error state:
//
//   - SEND, SEND_WITH_IMM: needs the peer's next receive WQE to be usable
//     (posted, and released if the peer's receive queue is managed); until
//     then the send waits, blocking its queue. The payload (the SGEs, the
//     inline data or the calc result) is scattered into the receive WQE's
//     SGEs. The receive completes first (IBV_WC_RECV, byte_len, src_qp,
//     imm and IBV_WC_WITH_IMM for SEND_WITH_IMM), then the send
//     (IBV_WC_SEND, byte_len).
//   - RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ: the remote range must lie
//     in an MR of the peer's PD whose rkey matches and which grants
//     IBV_ACCESS_REMOTE_WRITE / REMOTE_READ, and the peer QP must grant the
//     same access (device.Connect grants both). WRITE_WITH_IMM also consumes a
//     receive WQE (IBV_WC_RECV_RDMA_WITH_IMM) and waits for one as SEND
//     does. Completions IBV_WC_RDMA_WRITE / IBV_WC_RDMA_READ with byte_len.
//   - NOP: completes (IBV_WC_SEND).
//   - CQE_WAIT: runs once its CQ has produced the CQEs rule 5 computed.
//   - SEND_ENABLE, RECV_ENABLE: raise the target queue's release point to
//     what rule 4 computed (an enable from before the target's last RESET
//     releases nothing).
//
// Every local SGE is checked when its WQE executes: the lkey must name a
// live MR of the QP's PD containing the range, and data arriving in it
// (receive, RDMA read) needs IBV_ACCESS_LOCAL_WRITE. A bad sender SGE
// completes the sender with IBV_WC_LOC_PROT_ERR; a bad receive SGE the
// receiver with IBV_WC_LOC_PROT_ERR and the sender with
// IBV_WC_REM_OP_ERR; a payload longer than the receive the receiver with
// IBV_WC_LOC_LEN_ERR and the sender with IBV_WC_REM_INV_REQ_ERR; a bad
// remote range, rkey or access the sender with IBV_WC_REM_ACCESS_ERR
// (the responder is unaffected); a peer missing or not in RTR/RTS the
// sender with IBV_WC_RETRY_EXC_ERR. Across devices these are the RC
// transport's answers (NAKs, or silence and the ACK timer), as below.
//
// A QP in the error state (after such an error, an overrun, or moved
// there with ExpModifyQP) flushes its WQEs one per round, send queue
// first, released or not, each completing with IBV_WC_WR_FLUSH_ERR.
// Completions carry wr_id, status, opcode, byte_len, qp_num, src_qp
// (receives), imm_data; ibv_exp_wc also gets qp and exp_wc_flags
// (IBV_EXP_WC_QP, plus IBV_EXP_WC_WITH_IMM).
//
// # Calc
//
// With IBV_EXP_SEND_WITH_CALC a SEND or an RDMA_WRITE_WITH_IMM (from a
// cross-channel QP, rule 1) reduces its operands and delivers the result
// instead of its SGEs: as the payload of the SEND, or written at
// remote_addr under the rkey by the WRITE, whose immediate consumes a
// receive. Each operand is one SGE of exactly 16 bytes: a big-endian
// 64-bit value, then a big-endian 8-byte id that only MAXLOC reads; at
// least one. data_size must be IBV_EXP_CALC_DATA_SIZE_64_BIT. As on mlx4
// and mlx5, ADD, BAND, BXOR and BOR work on INT (int64), UINT (uint64)
// and FLOAT (float64), and MAXLOC on UINT only; anything else, calc on
// another opcode, or with IBV_SEND_INLINE, is EINVAL at post time.
// Operands combine in SGE order; ADD wraps for INT and UINT and is IEEE
// addition for FLOAT; the bitwise operations work on the 64 bits. The
// result is written big-endian at offset 0 of the target: 8 bytes, or 16
// for MAXLOC (the largest value, then its id, the smallest id among
// equal values); bytes 16 and on are never touched, so the target may
// hold the next round's other operands. ibv_exp_query_device with
// IBV_EXP_DEVICE_ATTR_CALC_CAP reports data_types INT|UINT|FLOAT,
// data_sizes 64-bit and, for each type, ops ADD|BAND|BXOR|BOR, each a
// mask of 1 << value (MAXLOC, accepted on UINT, is not reported, as the
// providers do not report it).
//
// # Completion queues
//
// A CQ asked for cqe entries gets a ring of the smallest power of two of
// slots above cqe, and its CQE field says that size minus one, as mlx4 and
// mlx5 do (15 gives 16 slots, 16 gives 32). A poll takes the next slot
// only if it was written in the poller's pass over the ring (the
// ownership bit of an HCA's CQ). When a CQE finds the ring full:
//
//   - A CQ that does not ignore overruns refuses it: the CQ goes into
//     error and raises IBV_EVENT_CQ_ERR (once), the CQE is lost, and the
//     QP whose completion it was goes to the error state with
//     IBV_EVENT_QP_FATAL. What the ring holds stays pollable; later CQEs
//     for the CQ are lost too, each failing its QP the same way.
//   - A CQ that ignores overruns (device.IgnoreOverrun, which sets
//     IBV_EXP_CQ_IGNORE_OVERRUN with ibv_exp_modify_cq, or
//     device.CrossChannelCQ: a CQ created with
//     IBV_EXP_CQ_CREATE_CROSS_CHANNEL, as the mlx5 driver treats it)
//     raises no event and its QPs keep working: the CQE
//     is written over the oldest unpolled one, and once the ring has
//     wrapped, polls find nothing until the writer comes round again,
//     exactly as on hardware. Size CQs you poll for what they must hold;
//     a CQ only waits look at may be small.
//
// CQE_WAIT counts the CQEs written, polled or not. Polling, and only
// polling (ibv_poll_cq or ibv_exp_poll_cq), frees the send and receive
// queue slots of the WQEs the CQEs complete (see Post path): a CQ whose
// CQEs are only counted by waits lets its queues fill. CQStats shows the
// counters. A CQ created with a completion channel and armed with
// ibv_req_notify_cq writes one event to the channel for its next CQE (a
// solicited-only arm: for its next solicited or failed one), which
// ibv_get_cq_event reads; the arm is then spent.
//
// # Completions as an HCA's
//
// An HCA writes a CQE microseconds after the doorbell, from the device,
// so a program that polls once right after posting and counts on the
// completion fails there. Here too: a completion of a QP that is not on
// the wire (loopback, a manager's own WQEs) is written to its CQ about
// 1 us after the device produced it, never in the poll whose run
// produced it, whatever the machine's load: that poll runs the work (its
// data is placed) and returns nothing of it; a later poll does. CQE_WAIT
// counts CQEs once they are written, and an armed CQ's event fires then,
// so an event is never ahead of its CQE. Completions of QPs on the wire
// waited for a real round trip already and are written at once. So the
// vendor's CORE-Direct test holds: a CQE_WAIT for N completions has not
// completed when the manager's CQ is polled right after the N-th send is
// posted (TestVendorTC5SendWaitTI6Async).
//
// Pending CQEs are written at the start of the device's next run (a
// poll, Progress, an autonomous device's post or thread pass), in the
// order they were produced. Progress writes them all at once: it is the
// explicit "run until nothing more can run", and its DeadlockError
// stays exact. Nobody waits on a program that polls nothing: for an
// armed CQ, and on a device whose thread runs the queues (Autonomous,
// softdev exec), the transport thread writes them when they are due, so
// a program that posts and sleeps in ibv_get_cq_event gets its event. A
// device that runs by polls (the default, in process) still executes
// nothing until something polls or calls Progress.
//
// SyncCompletions makes a completion visible as soon as it is produced,
// as softdev did before: a poll returns what its own run completed, step
// by step, the same every run. It is for tests of softdev's own rules;
// code that passes only with it would fail on an HCA.
//
// CompletionJitter(max) (or $VERBSEXP_SOFTDEV_JITTER, for softdev exec
// too: VERBSEXP_SOFTDEV_JITTER=50us) delays each completion by a random
// time up to max more, to expose programs that assume an order or a
// timing the verbs do not promise: between QPs on a shared CQ, or a
// SEND's receive before its send. What the verbs promise holds: one
// QP's send completions come in order, and its receive completions;
// CQE_WAIT and the enables follow the rules above on what is written.
//
// # Asynchronous events
//
// The context's async_fd (Context().AsyncFD, Device.AsyncFD) is a real
// file descriptor (an eventfd) that is readable exactly while an event is
// pending, as an HCA's: an application poll(2)s it (or makes it
// non-blocking with fcntl) and reads the events with Device.GetAsyncEvent
// and acknowledges each with Device.AckAsyncEvent, or with
// verbs.GetAsyncEvent and verbs.AckAsyncEvent as with an HCA (the
// same code). An event has its EventType
// and its element: verbs.EventCQErr with Element.CQ(), verbs.EventQPFatal
// with Element.QP(). GetAsyncEvent blocks while none is pending unless
// the fd is non-blocking (then EAGAIN); Close ends a blocked call with
// ErrClosed. Events are raised while the device runs (posts never run
// it), and the ones still queued for a CQ or QP go when it is destroyed.
// The device counts events on a private dup of the eventfd, so what a
// user does to async_fd (closing it, its number then taken by another
// file; reading or writing counts) never makes it fail, block, spin or
// write into another file: the events stay queued for GetAsyncEvent, and
// Close closes async_fd only if it is still that eventfd.
//
// # The network device
//
// Devices are linked as RoCE ports are: each is at an IP address
// (Address, else $VERBSEXP_SOFTDEV_ADDR (AddrEnv), else a loopback
// address of its own: 127.0.0.2, .3, …), its GID is that address
// (IPv4-mapped, as RoCE v2 forms it, or IPv6) and it listens there on
// TCP port WirePort (4791, RoCE v2's UDP port). A loopback address
// where anything listens at that port (another process's device, any
// other program) is skipped, and processes opening devices at the same
// moment each get one of their own; Open returns a device or an error,
// never neither. When a program listens at the port's wildcard address
// (0.0.0.0, or [::] taking IPv4 too), no loopback address can be had:
// Open then fails at once with EADDRINUSE naming that listener and its
// process (it used to try all 16.7 million addresses first, 90 s). A QP moved to RTR with a
// GRH whose dgid is another device's GID (sgid_index 0, port 1: what
// ibv_modify_qp on a RoCE port requires; device.Connect builds it) is connected
// to that device's QP dest_qp_num, in this process or another, on this
// host or another: the same attributes as between two hosts' HCAs. The
// first RTR to a device opens the connection to it, so a peer that is
// not listening shows at once in Device.Wire (ConnectFails, LastError).
//
// Between devices the RC transport runs as an HCA's does, packet by
// packet (transport_rc.c has the rules in full): PSNs from sq_psn and rq_psn,
// path_mtu segmentation, ACKs and NAKs; the local ACK timer (4.096 µs <<
// timeout) resends, retry_cnt times, then fails the oldest WQE with
// IBV_WC_RETRY_EXC_ERR (a dead or unreachable peer); a SEND to a QP
// without a receive WQE draws an RNR NAK and is sent again after the
// responder's min_rnr_timer, rnr_retry times (7: for ever), then
// IBV_WC_RNR_RETRY_EXC_ERR; a PSN ahead of the expected one draws a
// sequence NAK and a resend, one behind is a duplicate, answered again
// and not executed again; READs and atomics (max_rd_atomic of them in
// flight) are answered from the responder's memory. The responder checks
// what a frame claims: its QP in RTR or RTS, connected back to the
// sender's GID and QP, the opcode sequence, the QP's access flags and the
// MRs; an invalid request or an access violation moves it to the error
// state with IBV_EVENT_QP_REQ_ERR or IBV_EVENT_QP_ACCESS_ERR, and its
// first packet in RTR raises IBV_EVENT_COMM_EST. The port follows its
// interface: IBV_EVENT_PORT_ERR when the link holding the address goes
// down, IBV_EVENT_PORT_ACTIVE when it is back. The timers are real time
// (TimerScale shortens them for tests); QPWire and Device.Wire count
// packets, resends, timeouts, NAKs and drops.
//
// Who runs the send queues: by default polls and Progress, until a QP
// connects to another device; from then on the device's transport thread
// runs them too, as an HCA does while the host computes (a peer never
// waits for this process to poll). Autonomous starts so, and a post then
// rings the doorbell (the thread runs it at once); PollDriven keeps the
// queues to polls for good. The transport (packets in, ACKs, resends)
// always runs in the thread, except that frames arriving while the
// application polls are left to that poll for up to 3 µs
// (Device.Wire().LeftToPoller counts it), rather than the two threads
// queueing for the device's lock in turn. Once the polls have read the
// frames 64 times in a row, frames stop waking the thread at all
// (Device.Wire().Unwatched counts it) until the polls stop for 200 µs
// or a CQ is armed for an event: a thread woken only to find the frames
// taken costs the polling program, and its peer, a core's time. Each
// time a frame had to wait out those 200 µs, the polls must read twice
// as many in a row before they take the frames from the thread again.
//
// The wire is TCP, one connection between two devices for both
// directions (the one with the lower GID opens it when a QP's path
// resolves, the other sends back on it, so TCP's acknowledgements ride
// on frames; if the other must send before it sees that connection, it
// opens its own and each sends on its own): a handshake in which both
// devices prove they hold the wire key (below), then frames of a
// 4-byte length, a 64-byte header
// (fields little-endian at fixed offsets) and at most one MTU of
// payload. A payload of 1 KiB or more is not copied into the
// connection's send buffer: sendmsg(2) takes it from the MR, as an HCA's
// DMA reads it, before the device lock is released (what the socket does
// not take then is copied; Device.Wire().Gathered and GatherCopies count
// both). A send(2) costs about as much for one small frame as for
// several, so a plain ACK that a poll or a post produces may wait up to
// 20 µs for the next request to the same peer and leave behind it in the
// same send, as HCAs coalesce ACKs (the transport thread sends what
// still waits then; an application that goes quiet delays its peer's
// completion by at most 1 ms): a peer polling for that ACK finds the
// request's data placed when the completion shows. The transport
// thread's own ACKs wait so only while the application answers its
// peer within those 20 µs (Device.Wire().ThreadHolds counts them): a
// target that never answers gets no delay past the first.
//
// An HCA's source QP and GID come from the kernel and the hardware; a
// TCP connection's claims come from whoever opened it, and on loopback
// any local user may bind any source address. So the wire authenticates:
// the opener's hello names its GID (which must be the connection's
// source address), the GID it means to reach and a random nonce; the
// acceptor replies with its own nonce and an HMAC-SHA256, under the wire
// key, of both messages; the opener answers with an HMAC of the same
// under another label. The key never crosses the wire, and fresh nonces
// on both sides make a recorded handshake worthless. The opener sends no
// frame before the reply proves the acceptor (a stranger listening where
// a device was gets nothing), the acceptor takes none before the proof,
// and only authenticated connections carry a QP's packets. A connection
// whose handshake fails is closed and counted (Device.Wire().Guard
// .AuthRefused; the opener's LastError is EACCES when the peer's key
// differs).
//
// The key is, in order: $VERBSEXP_SOFTDEV_KEY (KeyEnv, 32 to 128 hex
// digits); the file $VERBSEXP_SOFTDEV_KEY_FILE (KeyFileEnv) names; else
// the user's own ~/.cache/verbsexp/softdev-wire.key, made at first use
// with 32 random bytes, mode 0600 (the home of the effective uid, from
// the password database: a process whose $HOME points elsewhere, as
// sudo -E leaves it, still finds its own user's file). A key file is
// used only if it is a regular file of the effective uid that no one
// else may read or write, on a path whose every directory belongs to
// root or that uid and is writable by no one else unless sticky: a file
// another user planted, or could replace, is refused, and Open says
// which and why (EACCES). So the devices of one user on a host, in one
// process or many, Go programs or vendor programs under softdev exec
// (the driver reads the same file: as root, root's), trust each other
// and no one else. Devices of different users, or on different hosts,
// talk when given the same $VERBSEXP_SOFTDEV_KEY, as a job gives its
// processes the rendezvous token (mpirun -x VERBSEXP_SOFTDEV_KEY; sudo
// drops it unless told to keep it: sudo --preserve-env=VERBSEXP_SOFTDEV_KEY).
// A key was chosen over asking the kernel who is at the other end:
// SO_PEERCRED answers only for Unix sockets, and a key works across
// hosts too. Past the handshake the wire is plain TCP: someone on the
// path between two hosts (or root on one) can still read or change
// frames, as on a RoCE fabric; bind devices to a private network as you
// would one.
//
// What a stranger can hold is bounded. Connections still in their
// handshake are watched by the transport thread alone, hold no buffers
// (about 500 bytes each; they are read a message at a time, and anything
// but the handshake's next message closes them), must be over within
// 2 s, and have a budget of their own: 256 (the oldest goes for a new
// one; 128 KiB in all), 16 from one source address (its oldest goes;
// 8 KiB). Authenticated connections (4096) and the device's own (4096)
// have budgets apart; when one is full, the connection used the least
// recently that carries no link goes. When accept(2) finds no file
// descriptor left (EMFILE, ENFILE), the listener rests 50 ms, doubling
// up to 1 s, rather than wake the thread again at once for the
// connection still queued (Guard.AcceptPauses).
//
// Where it differs from an HCA, on purpose:
//
//   - Between QPs of one device, packets are delivered within the
//     engine's step, so in-process schedules stay deterministic: a
//     packet nobody would answer fails its WQE with IBV_WC_RETRY_EXC_ERR
//     as soon as the step ends, without waiting out the timer, and a
//     SEND that would find no receive WQE waits for one at no cost
//     instead of drawing RNR NAKs. Between devices (even two in one
//     process) time is real and both cost what they cost on an HCA.
//   - A send that ends in IBV_WC_RETRY_EXC_ERR raises no asynchronous
//     event (HCAs differ here; the completion says it).
//   - A QP with only receives outstanding learns nothing when its peer
//     dies, as on an HCA: RC has no keepalive. runtime/coll watches its
//     neighbors for this reason.
//
// # Deadlocks
//
// After running, Progress looks at every QP in RTS whose send queue still
// holds work: its head is a CQE_WAIT its CQ has not satisfied, a send
// whose peer has no usable receive WQE, or a WQE of a managed queue that
// no enable has released. Nothing can progress at that point, so unless
// the caller posts more, that work never runs: Progress returns a
// *DeadlockError listing each such queue with the QP number and wr_id,
// and what it needs: for a wait the CQ, the base and the count it was
// posted with and the CQEs produced; for a send the peer and its receive
// queue (posted, released, base); for a held WQE its position, the
// queue's release point and base, and, when it is itself a wait or an
// enable, its own base and count. It never hangs. The error describes
// the state after that call; posting more work may unblock the queues.
// Polls never report it. A device with a QP connected to another device
// reports none: what cannot run now may run when a peer answers, which
// this device cannot foresee (bound such waits with a deadline, as on an
// HCA).
package softdev
