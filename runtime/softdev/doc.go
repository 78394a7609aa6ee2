// Package softdev is a software verbs device with Mellanox cross-channel
// ("CORE-Direct") semantics. It lives in the calling process, so tests and
// CI can run task lists without an HCA or libibverbs.
//
// # How it plugs in
//
// Open builds a provider context the way a verbs provider lays one out:
// a struct verbs_context_exp directly in front of a struct verbs_context
// whose last member is the struct ibv_context handed out by
// Device.Context. Both dispatch tables (ibv_context.ops and the exp
// record) point into this package's C code. The generated wrappers in
// package verbs therefore run the headers' real inline code and reach the
// device through the same lookups as with hardware:
//
//	verbs.ExpPostTask  -> lib_exp_post_task     verbs.ExpCreateCQ -> exp_create_cq
//	verbs.ExpPostSend  -> drv_exp_post_send     verbs.ExpModifyCQ -> lib_exp_modify_cq
//	verbs.PostSend     -> ops.post_send         verbs.ExpCreateQP -> lib_exp_create_qp
//	verbs.PostRecv     -> ops.post_recv         verbs.ExpModifyQP -> lib_exp_modify_qp
//	verbs.PollCQ       -> ops.poll_cq           verbs.ExpQueryDevice -> lib_exp_query_device
//	verbs.ExpPollCQ    -> drv_exp_ibv_poll_cq
//
// The exported verbs (ibv_alloc_pd, ibv_reg_mr, ibv_destroy_*, …) live in
// libibverbs, which this device does not need; Device offers them as
// methods that call the context's ops as libibverbs would. CreateCQ and
// CreateQP go through verbs.ExpCreateCQ and verbs.ExpCreateQP themselves.
//
// # Objects
//
//	d, _ := softdev.Open()
//	pd, _ := d.AllocPD()
//	mr, _ := d.RegMR(pd, buf, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
//	cq, _ := d.CreateCQ(256, softdev.CrossChannelCQ())
//	mgr, _ := d.CreateQP(pd, cq, cq, softdev.CrossChannel())
//	a, _ := d.CreateQP(pd, cq, cq, softdev.ManagedSend())
//	b, _ := d.CreateQP(pd, cq, cq)
//	softdev.Connect(a, b)    // RESET -> INIT -> RTR -> RTS, each with the other's qp_num
//	softdev.Connect(mgr, mgr) // a QP may be connected to itself
//	… verbs.ExpPostTask(d.Context(), task, &bad) …
//	n, _ := verbs.ExpPollCQ(cq, len(wc), &wc[0], uint32(unsafe.Sizeof(wc[0])))
//	… destroy everything …
//	err := d.Close() // *LeakError if something was left
//
// Only RC QPs exist, connected in loopback to a QP of the same device. QP
// numbers start at 0x100 and MR keys are derived from a slot and a
// generation, with lkey != rkey, so a stale or mistyped key is caught.
// Destroying a PD, CQ or QP still in use (by MRs or QPs, or by a pending
// CQE_WAIT or ENABLE naming it) fails with EBUSY. Registered memory must
// stay valid and unmoved until DeregMR: C memory (Calloc, CallocSlice),
// or Go memory pinned by the caller. WRs, tasks and SGE lists handed to
// the verbs should be C memory too (Go's cgo pointer rules).
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
// posted:
//
//   - ENOMEM: the ring is full (max_send_wr / max_recv_wr WQEs posted and
//     not yet retired).
//   - EINVAL: the QP is not in RTS (send) or is in RESET (receive); more
//     SGEs than max_sge; an opcode the device does not simulate (atomics,
//     memory windows, UMR, TSO); an unknown send flag; CQE_WAIT,
//     SEND_ENABLE or RECV_ENABLE on a QP created without CROSS_CHANNEL, or
//     naming a CQ or QP of another device, or with a negative count;
//     IBV_EXP_SEND_WAIT_EN_LAST on another opcode; a calc WR that is
//     malformed (see Calc); an inline payload over max_inline_data;
//     comp_mask bits.
//
// ibv_exp_post_task walks the task list in order and posts each task's
// WR list to its QP's send (IBV_EXP_TASK_SEND) or receive
// (IBV_EXP_TASK_RECV) queue, all under one hold of the device lock. The
// first failure stops the walk: the errno is returned and *bad_task names
// the task; WRs posted before it (in earlier tasks and earlier in the
// same list) stay posted. The verbs API cannot say which WR of that task
// failed; Device.TaskFailure reports it.
//
// # Execution
//
// Nothing executes during a post. The device runs in Progress and at the
// start of every poll (so polling alone drives a schedule). A run is a
// sequence of rounds; each round visits the QPs in creation order and
// lets each execute (or flush) at most the one WQE at the head of its send
// queue; rounds repeat until one makes no progress. Everything happens
// under one device mutex (posts from several goroutines are serialized),
// so the outcome depends only on the order of the calls on the device:
// the same calls give the same completions in the same order.
//
// A send WQE is ready when it is posted and, on a managed send queue,
// enabled. A ready WQE executes as follows; success completes only if it
// was signaled (IBV_EXP_SEND_SIGNALED, or sq_sig_all), errors always
// complete and move the QP to the error state:
//
//   - SEND, SEND_WITH_IMM: needs the peer's next receive WQE to be ready
//     (posted, and enabled if the peer's receive queue is managed); until
//     then the send waits, blocking its queue, as an RNR retry that never
//     gives up. The payload (the SGEs, the inline data or the calc result)
//     is scattered into the receive WQE's SGEs. The receive completes
//     first (IBV_WC_RECV, byte_len, src_qp, imm and IBV_WC_WITH_IMM for
//     SEND_WITH_IMM), then the send (IBV_WC_SEND, byte_len).
//   - RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ: the remote range must lie
//     in an MR of the peer's PD whose rkey matches and which grants
//     IBV_ACCESS_REMOTE_WRITE / REMOTE_READ, and the peer QP must grant the
//     same access (Connect grants both). WRITE_WITH_IMM also consumes a
//     receive WQE (IBV_WC_RECV_RDMA_WITH_IMM) and waits for one as SEND
//     does. Completions IBV_WC_RDMA_WRITE / IBV_WC_RDMA_READ with byte_len.
//   - NOP: completes (IBV_WC_SEND).
//   - CQE_WAIT: see below; completes as IBV_WC_SEND when satisfied.
//   - SEND_ENABLE, RECV_ENABLE: raise the target queue's enable index
//     (see below) and complete as IBV_WC_SEND. Enabling a queue that is
//     not managed is accepted and does nothing.
//
// Every local SGE is checked when its WQE executes: the lkey must name a
// live MR of the QP's PD containing the range, and data arriving in it
// (receive, RDMA read) needs IBV_ACCESS_LOCAL_WRITE. Errors:
//
//	sender SGE bad                 sender IBV_WC_LOC_PROT_ERR
//	receive SGE bad                receiver IBV_WC_LOC_PROT_ERR, sender IBV_WC_REM_OP_ERR
//	payload longer than receive    receiver IBV_WC_LOC_LEN_ERR, sender IBV_WC_REM_INV_REQ_ERR
//	remote range, rkey or access   sender IBV_WC_REM_ACCESS_ERR (the responder is unaffected)
//	peer missing or not RTR/RTS    sender IBV_WC_RETRY_EXC_ERR
//
// A QP in the error state (after such an error, or moved there with
// ExpModifyQP) flushes its WQEs one per round, send queue first, enabled
// or not, each completing with IBV_WC_WR_FLUSH_ERR. Moving a QP to RESET
// discards its WQEs. Completions carry wr_id, status, opcode, byte_len,
// qp_num, src_qp (receives), imm_data; ibv_exp_wc also gets qp and
// exp_wc_flags (IBV_EXP_WC_QP, plus IBV_EXP_WC_WITH_IMM).
//
// # Cross-channel counts
//
// Counts are producer indexes, fixed when the WAIT or ENABLE is posted,
// and cumulative:
//
//   - Each CQ counts the completions it has produced since creation
//     (including ones dropped on a full ring), and keeps a wait index,
//     initially 0. Posting a CQE_WAIT with cq_count n advances that CQ's
//     wait index by n; the WAIT is satisfied once the CQ has produced at
//     least that many completions in total. So WAIT(cq, 2) then WAIT(cq, 1)
//     wait for the 2nd and then the 3rd completion, whichever QPs post
//     them. A WAIT blocks the rest of its send queue until satisfied.
//   - Each managed queue keeps an enable index, initially 0: WQEs below it
//     may run. Posting an ENABLE with wqe_count n > 0 advances the
//     target's pending enable index by n (WQEs may be enabled before they
//     are posted: they run when posted); wqe_count 0 enables everything
//     posted to that queue so far. The index takes effect when the ENABLE
//     executes.
//   - IBV_EXP_SEND_WAIT_EN_LAST is accepted on CQE_WAIT, SEND_ENABLE and
//     RECV_ENABLE and changes nothing here (the device has no batching to
//     end).
//
// # Calc
//
// A SEND with IBV_EXP_SEND_WITH_CALC reduces its operands and sends the
// result as the payload. op.calc.calc_op is ADD, MAXLOC, BAND, BXOR or
// BOR; data_type INT (int64), UINT (uint64) or FLOAT (float64); data_size
// must be IBV_EXP_CALC_DATA_SIZE_64_BIT. Each SGE is one operand, in host
// byte order: an 8-byte value (SGE length 8), or for MAXLOC a 16-byte
// pair {value, uint64 index} (SGE length 16). At least one operand; other
// lengths are EINVAL at post time. Operands are combined left to right in
// SGE order. ADD wraps for INT and UINT and is IEEE addition for FLOAT;
// the bitwise operations work on the 64 bits whatever the type. MAXLOC
// gives the largest value with its index, the smallest index among equal
// values; a NaN never replaces the current maximum. The result is 8 bytes
// (16 for MAXLOC); the receive WQE must have room for it.
//
// # Completion queues
//
// A CQ holds the cqe entries it was created with. When a completion finds
// it full, the completion still counts (produced, and for CQE_WAIT) but is
// dropped. On a CQ created with CrossChannelCQ
// (IBV_EXP_CQ_CREATE_CROSS_CHANNEL) or given IgnoreOverrun
// (IBV_EXP_CQ_IGNORE_OVERRUN through ibv_exp_modify_cq) that is all; on
// any other CQ it is an overrun, after which every poll fails with
// EOVERFLOW. Device.CQStats shows the counters. Completion channels are
// not supported.
//
// # Deadlocks
//
// After running, Progress looks for send queues in RTS whose head WQE is
// ready but cannot run: a CQE_WAIT its CQ has not satisfied, or a send
// whose peer has no ready receive WQE. Nothing else can progress at that
// point, so unless the caller posts more, the schedule can never finish:
// Progress returns a *DeadlockError listing each such wait (QP number,
// wr_id, CQ, completions needed and produced) and send (QP number, wr_id,
// peer). It never hangs. The error describes the state after that call;
// posting more work may unblock the queues. Polls never report it.
package softdev
