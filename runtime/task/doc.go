//go:build linux && cgo

// Package task builds cross-channel task lists for ibv_exp_post_task in C
// memory and posts them with one call.
//
// A List owns one C allocation (an arena) with room for a fixed number of
// tasks, send and receive work requests and scatter/gather entries, laid
// out as the generated types (verbs.ExpTask, verbs.ExpSendWR, verbs.RecvWR,
// verbs.SGE). Builders append records to the arena and link them; each
// returns a typed pointer into C memory that the caller may adjust in
// place. Post hands the first task to ibv_exp_post_task: nothing is
// marshalled or copied at post time, and nothing is allocated.
//
// Verbs copy work requests into the queues when they are posted, so a List
// may be posted again as soon as Post returns (a standing schedule), or
// Reset and rebuilt without allocating. The data buffers the SGEs name are
// another matter: they must stay put until their completions are polled
// (see package lease).
//
// The cross-channel builders take the wr_id and the send flags like Send
// does: Wait(wrID, flags, cq, count), SendEnable(wrID, flags, qp, count),
// RecvEnable(wrID, flags, qp, count). Their counts are relative to the
// CQ's wait base or the queue's enable base, which only a WR with
// verbs.ExpSendWaitEnLast in its flags moves (see package softdev for
// the rules a device follows). A list on the software device, as Example
// runs it:
//
//	dev, err := softdev.Open()
//	if err != nil {
//		log.Fatal(err) // it says why: an address or a port taken (and by whom), …
//	}
//	defer dev.Close()
//	pd, _ := dev.AllocPD()
//	defer dev.DeallocPD(pd)
//	cq, _ := dev.CreateCQ(8)
//	defer dev.DestroyCQ(cq)
//	qp, _ := dev.CreateQP(pd, cq, cq)
//	defer dev.DestroyQP(qp)
//	softdev.Connect(qp, qp) // a QP connected to itself
//	buf, _ := lease.Alloc(64)
//	defer buf.Free()
//	mr, _ := dev.RegMR(pd, buf.Pointer(), buf.Len(), verbs.AccessLocalWrite)
//	defer dev.DeregMR(mr)
//
//	l, _ := task.New(dev.Context(), task.Capacity{Tasks: 2, SendWRs: 1, RecvWRs: 1, SGEs: 2})
//	defer l.Free()
//	l.RecvTask(qp)
//	l.Recv(1, verbs.SGE{Addr: buf.Addr() + 32, Length: 32, Lkey: mr.Lkey})
//	l.SendTask(qp)
//	l.Send(2, verbs.ExpSendSignaled, verbs.SGE{Addr: buf.Addr(), Length: 32, Lkey: mr.Lkey})
//	err = l.Post() // one ibv_exp_post_task; a *task.PostError names the task that failed
//
//	wc := softdev.CallocSlice[verbs.ExpWC](2)
//	defer softdev.Free(unsafe.Pointer(&wc[0]))
//	n, _ := verbs.ExpPollCQ(cq, 2, &wc[0], uint32(unsafe.Sizeof(wc[0])))
//	fmt.Println(err, n, wc[0].WRID, wc[1].WRID)
//
// ExampleList is a whole schedule with a managed worker and a manager.
//
// Misuse is an error: a nil or freed List (ErrFreed), a builder called
// without a task or on the wrong kind (ErrNoTask, ErrWrongKind), counts
// that do not fit the C fields, SGEs and RDMA ranges that wrap around the
// address space, Calc operands that are not one 16-byte SGE each: all
// wrap EINVAL and leave the List as it was; a full region is a
// *CapacityError (ENOMEM). What only the device can judge (keys, ranges
// inside MRs, queue states) comes back from Post as a *PostError. A List
// holds its context's address: Free it before the device is closed
// (posting to a closed context is as undefined as ibv_exp_post_task after
// ibv_close_device).
package task
