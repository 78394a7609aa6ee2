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
//	device.ConnectPair(qp, qp) // a QP connected to itself
//	buf, _ := lease.Alloc(64)
//	defer buf.Free()
//	mr, _ := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
//	defer dev.DeregMR(mr)
//
//	l, _ := task.New(dev.Context(), task.Capacity{Tasks: 2, SendWRs: 1, RecvWRs: 1, SGEs: 2})
//	defer l.Free()
//	l.RecvTask(qp)
//	l.Recv(1, verbs.SGE{Addr: buf.Addr() + 32, Length: 32, Lkey: mr.Lkey})
//	l.SendTask(qp)
//	l.Send(2, verbs.ExpSendSignaled, verbs.SGE{Addr: buf.Addr(), Length: 32, Lkey: mr.Lkey})
//	err = l.Post() // one ibv_exp_post_task; a *task.PostError names the task that failed
//	// (or the first builder error, if a builder failed: then nothing is posted)
//
//	wc := make([]verbs.ExpWC, 2)
//	n := 0
//	for n < 2 { // the completions come microseconds later, as an HCA's
//		k, _ := verbs.ExpPollCQ(cq, wc[n:])
//		n += int(k)
//	}
//	fmt.Println(err, n, wc[0].WRID, wc[1].WRID)
//
// examples/tasklist (the README's first program) is a whole schedule
// with a managed worker and a manager.
//
// Misuse is an error: a nil or freed List (ErrFreed), a builder called
// without a task or on the wrong kind (ErrNoTask, ErrWrongKind), a nil
// QP or CQ, counts that do not fit the C fields, SGEs and RDMA ranges
// that wrap around the address space, Calc operands that are not one
// 16-byte SGE each: all wrap EINVAL and add nothing; a full region is a
// *CapacityError (ENOMEM) naming the Capacity field to raise. What only
// the device can judge (keys, ranges inside MRs, queue states) comes
// back from Post as a *PostError. A List holds its context's address:
// Free it before the device is closed (posting to a closed context is as
// undefined as ibv_exp_post_task after ibv_close_device).
//
// # Builder errors stick
//
// A builder's error sticks, as a bufio.Writer's does: the List keeps the
// first one, every builder after it adds nothing and returns it (the
// same value: errors.Is and errors.As see what the first saw), and Post
// returns it without posting anything; Err returns it too. A list may
// therefore be built without checking each builder and checked once, at
// Post: a list that lacks a work request it was asked for never posts.
// As ExampleList_Err runs it, with room for one send work request:
//
//	l.SendTask(qp)
//	l.Send(1, verbs.ExpSendSignaled)        // a zero-length send
//	l.Wait(2, verbs.ExpSendSignaled, cq, 1) // no room: the error sticks …
//	l.SendEnable(3, 0, qp, 0)               // … and this adds nothing
//	err = l.Post()                          // posts nothing: the first error
//
// Reset clears the error with the rest (the rebuilt list is a new list).
// A copy of a List shares it, as it shares everything: an error recorded
// or a Reset done through either is the other's. Once the List is freed,
// everything, Err included, is ErrFreed. Post's own errors do not stick:
// ErrEmpty leaves the List to be built, and after a *PostError the List
// is as built and may be posted again (after ENOMEM, once the full
// queue's CQ is polled); the verb leaves posted what it posted before
// the failure, so posting the whole List again posts that again.
package task
