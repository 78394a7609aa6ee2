// Package semantics holds softdev's tests about semantics (the vendor's
// CORE-Direct rules and calc, the RC transport, asynchronous and
// completion events) as one table of cases (TestSemantics), each run on
// both paths a program can reach the device by:
//
//   - inprocess: softdev.Open(softdev.Autonomous(),
//     softdev.InfiniBandPort()), the closest twin of the driver (its
//     thread runs the queues as an HCA does; the port has a LID), the
//     exported verbs served by softdev's own front end; and
//     inprocess-default: softdev.Open() as most in-process users open it
//     (a RoCE port, the QPs naming each other by GID; send queues run by
//     polls until a QP connects to another device);
//   - library: the test binary re-run under `softdev exec` (package
//     launch), the device opened with runtime/device through MLNX_OFED
//     4.9's unchanged libibverbs.so.1 and the softdev driver, with no
//     stand-in of the in-process front end registered (each rank checks
//     that none served a call).
//
// A case is written once against the generated package's verbs: the
// exported ones (ibv_alloc_pd, ibv_modify_qp, ibv_get_async_event, …) and
// the headers' inline ones (ibv_exp_post_send, ibv_poll_cq, …), which
// in-process reach softdev's stand-ins and on the library path the
// vendor's library and the driver. It asserts only what a program sees
// through them: completions (statuses, wr_ids, lengths, data), errnos, QP
// states (ibv_query_qp), events, and time bounds from the QP's timers;
// never a softdev counter. Nothing relies on polls driving the device:
// every expectation is "these completions within a deadline" (10 s, the
// vendor's bound) and every "nothing happens" is watched for a quiet
// window (100 ms), so the cases hold on an HCA too.
//
// Every rank of every case is a process of its own (internal/multiproc)
// on every path: a case of two devices has two ranks, which trade their
// QP numbers, addresses and keys through the job's exchange files, and a
// rank can die (SIGKILL) or be stopped (SIGSTOP) as a process on a
// cluster can. A case that finds a difference between the paths not
// fixed yet says so in its knownDiff: it must still fail there, and
// skips loudly naming the bug; fixed, it fails until the mark goes.
//
// The library path needs the vendor's packages (OFED_DEBS, default
// ../shared/ofed-4.9/debs beside the checkout) and root (the launcher's
// mount namespace); without them its subtests skip saying why, or fail
// under VERBSEXP_REQUIRE_OFED (make test).
//
//	go test ./runtime/softdev/semantics                    # every case, every path
//	go test ./runtime/softdev/semantics -run '/RCRNR/library'
package semantics
