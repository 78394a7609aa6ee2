package launch_test

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// What the driver refuses that an HCA refuses (issue 35, defects 2 and
// 9), run as the vendor's libibverbs reaches it: this test binary's
// children under softdev exec, through the generated package's verbs.

// runChild runs the test named child of this binary under softdev exec
// with childEnv=env, and returns its output; it fails the test unless the
// child passed and printed "child: done".
func runChild(t *testing.T, child, env string) string {
	t.Helper()
	needVendor(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := launched(nil, "", self, "-test.run=^"+child+"$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+env)
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("%s under softdev exec did not end within 2 minutes (killed):\n%s", child, out)
	}
	skipped := regexp.MustCompile(`(?m)^\s*--- SKIP`)
	if err != nil || !strings.Contains(string(out), "child: done") || skipped.Match(out) {
		t.Fatalf("%s under softdev exec: %v\n%s", child, err, out)
	}
	return string(out)
}

// mmapped is anonymous memory outside Go's heap (WRs and SGEs may point
// into it), unmapped at the test's end.
func mmapped(t *testing.T, n, prot int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, prot, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// ibv_reg_mr through the driver checks the range as an HCA's pinning
// does: unmapped memory, a read-only mapping with LOCAL_WRITE, and 1 TiB
// from a 4 KiB buffer are refused with EFAULT (before, all three were
// registered, and a WRITE into such an MR killed the program).
func TestDriverRegMRChecksMemory(t *testing.T) {
	out := runChild(t, "TestDriverRegMRChild", "regmr")
	t.Logf("child:\n%s", out)
}

func TestDriverRegMRChild(t *testing.T) {
	if os.Getenv(childEnv) != "regmr" {
		t.Skip("SKIPPED: the child of TestDriverRegMRChecksMemory, run only by it under softdev exec")
	}
	dev, err := device.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := verbs.AllocPD(dev.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.DeallocPD(pd)
	pg := os.Getpagesize()
	ro := mmapped(t, pg, syscall.PROT_READ)
	small := mmapped(t, pg, syscall.PROT_READ|syscall.PROT_WRITE)
	// A hole: the middle page of three unmapped, after every other
	// mapping is made (a later mmap could fill it).
	gone := mmapped(t, 3*pg, syscall.PROT_READ|syscall.PROT_WRITE)
	unmapped := unsafe.Pointer(&gone[pg])
	if _, _, e := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(unmapped), uintptr(pg), 0); e != 0 {
		t.Fatal(e)
	}
	lw := int32(verbs.AccessLocalWrite)
	rw := int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)
	for _, c := range []struct {
		name   string
		addr   unsafe.Pointer
		n      uint64
		access int32
		want   error
	}{
		{"unmapped memory", unmapped, uint64(pg), lw, syscall.EFAULT},
		{"half unmapped", unsafe.Pointer(&gone[0]), uint64(2 * pg), 0, syscall.EFAULT},
		{"across the hole", unsafe.Pointer(&gone[0]), uint64(3 * pg), 0, syscall.EFAULT},
		{"the page before the hole", unsafe.Pointer(&gone[0]), uint64(pg), lw, nil},
		{"a read-only mapping with LOCAL_WRITE", unsafe.Pointer(&ro[0]), uint64(pg), lw, syscall.EFAULT},
		{"a read-only mapping with REMOTE_WRITE", unsafe.Pointer(&ro[0]), uint64(pg), rw, syscall.EFAULT},
		{"1 TiB from a 4 KiB buffer", unsafe.Pointer(&small[0]), 1 << 40, lw, syscall.EFAULT},
		{"a NULL address", nil, uint64(pg), 0, syscall.EFAULT},
		{"a read-only mapping, read access", unsafe.Pointer(&ro[0]), uint64(pg), int32(verbs.AccessRemoteRead), nil},
		{"the 4 KiB buffer", unsafe.Pointer(&small[0]), uint64(pg), rw, nil},
	} {
		mr, err := verbs.RegMR(pd, c.addr, c.n, c.access)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("ibv_reg_mr of %s: %v, want an MR", c.name, err)
		case c.want == nil:
			if err := verbs.DeregMR(mr); err != nil {
				t.Error(err)
			}
		case !errors.Is(err, c.want):
			if err == nil {
				verbs.DeregMR(mr)
			}
			t.Errorf("ibv_reg_mr of %s: %v, want %v", c.name, err, c.want)
		}
	}
	fmt.Println("child: done")
}

// Two ibv_open_device on softdev0 in one process: the second is refused
// with EBUSY and a message saying why (each context would be an engine
// of its own, numbering QPs alike, and a SEND from one to the other would
// land in the sender's own receive queue). The first context still
// works, and once it is closed the device opens again. Should the
// driver ever share one engine between contexts instead, the child
// checks what an HCA does: distinct QP numbers and the SEND delivered to
// the other context's QP.
func TestDriverOneContextPerDevice(t *testing.T) {
	out := runChild(t, "TestDriverContextsChild", "contexts")
	if strings.Contains(out, "second open: refused") &&
		!strings.Contains(out, "softdev: ibv_open_device(softdev0): the device is open in this process already") {
		t.Fatalf("the second ibv_open_device was refused without the driver's message on stderr:\n%s", out)
	}
	t.Logf("child:\n%s", out)
}

func TestDriverContextsChild(t *testing.T) {
	if os.Getenv(childEnv) != "contexts" {
		t.Skip("SKIPPED: the child of TestDriverOneContextPerDevice, run only by it under softdev exec")
	}
	first, err := device.Open("softdev0")
	if err != nil {
		t.Fatal(err)
	}
	second, err := device.Open("softdev0")
	if err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("second ibv_open_device: %v, want EBUSY (or a second context that works)", err)
		}
		fmt.Printf("second open: refused: %v\n", err)
		sendBetween(t, first.Context(), first.Context()) // the first one still works
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := device.Open("softdev0")
		if err != nil {
			t.Fatalf("ibv_open_device after the first context was closed: %v", err)
		}
		sendBetween(t, again.Context(), again.Context())
		if err := again.Close(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("child: done")
		return
	}
	fmt.Println("second open: accepted")
	sendBetween(t, first.Context(), second.Context())
	second.Close()
	first.Close()
	fmt.Println("child: done")
}

// sendBetween sends 64 bytes from an RC QP of a to an RC QP of b (b may
// be a), connected by LID, each with a receive posted: the receive at b
// must complete with the bytes, and a's QP must receive nothing. The QP
// numbers must differ.
func sendBetween(t *testing.T, a, b *verbs.Context) {
	t.Helper()
	type end struct {
		pd  *verbs.PD
		mr  *verbs.MR
		cq  *verbs.CQ
		qp  *verbs.QP
		buf []byte
	}
	var port verbs.PortAttr
	if err := verbs.QueryPort(a, 1, &port); err != nil {
		t.Fatal(err)
	}
	// Everything made here is destroyed before return, newest first: the
	// caller closes the contexts then.
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	mk := func(ctx *verbs.Context) *end {
		e := &end{buf: mmapped(t, os.Getpagesize(), syscall.PROT_READ|syscall.PROT_WRITE)}
		var err error
		if e.pd, err = verbs.AllocPD(ctx); err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { verbs.DeallocPD(e.pd) })
		if e.mr, err = verbs.RegMR(e.pd, unsafe.Pointer(&e.buf[0]), uint64(len(e.buf)), int32(verbs.AccessLocalWrite)); err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { verbs.DeregMR(e.mr) })
		var cattr verbs.ExpCQInitAttr
		if e.cq, err = verbs.ExpCreateCQ(ctx, 16, nil, nil, 0, &cattr); err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { verbs.DestroyCQ(e.cq) })
		qattr := verbs.ExpQPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QptRC, PD: e.pd,
			Cap:      verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1},
			CompMask: uint32(verbs.ExpQPInitAttrPD)}
		if e.qp, err = verbs.ExpCreateQP(ctx, &qattr); err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { verbs.DestroyQP(e.qp) })
		return e
	}
	x, y := mk(a), mk(b)
	if x.qp.QPNum == y.qp.QPNum {
		t.Fatalf("two QPs of the device both numbered %#x", x.qp.QPNum)
	}
	for _, c := range [][2]*end{{x, y}, {y, x}} {
		if err := connectTo(c[0].qp, c[1].qp.QPNum, port.LID, port.ActiveMTU); err != nil {
			t.Fatal(err)
		}
	}
	// The SGEs and WRs live in the buffers' second halves (not Go memory).
	post := func(e *end, id uint64, send bool) {
		sge := (*verbs.SGE)(unsafe.Pointer(&e.buf[2048]))
		*sge = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&e.buf[0]))), Length: 64, Lkey: e.mr.Lkey}
		if send {
			wr := (*verbs.SendWR)(unsafe.Pointer(&e.buf[2112]))
			*wr = verbs.SendWR{WRID: id, SGList: sge, NumSGE: 1, Opcode: verbs.WRSend, SendFlags: int32(verbs.SendSignaled)}
			bad := (**verbs.SendWR)(unsafe.Pointer(&e.buf[2304]))
			if err := verbs.PostSend(e.qp, wr, bad); err != nil {
				t.Fatal(err)
			}
			return
		}
		wr := (*verbs.RecvWR)(unsafe.Pointer(&e.buf[2112]))
		*wr = verbs.RecvWR{WRID: id, SGList: sge, NumSGE: 1}
		bad := (**verbs.RecvWR)(unsafe.Pointer(&e.buf[2304]))
		if err := verbs.PostRecv(e.qp, wr, bad); err != nil {
			t.Fatal(err)
		}
	}
	post(x, 1, false)
	post(y, 2, false)
	for i := range 64 {
		x.buf[i] = byte(i + 1)
	}
	// x's receive is posted first and reads into the same bytes it sends
	// from: a SEND that lands there (misdelivered) changes nothing, one
	// that lands at y fills y's buffer.
	post(x, 3, true)
	var wc [4]verbs.WC
	got := map[uint64]verbs.WCStatus{}
	for until := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(until); {
		for _, e := range []*end{x, y} {
			n, err := verbs.PollCQ(e.cq, wc[:])
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range wc[:n] {
				got[c.WRID] = c.Status
			}
		}
	}
	if got[3] != verbs.WCSuccess || got[2] != verbs.WCSuccess {
		t.Fatalf("completions %v: want the SEND (wr_id 3) and the receive at the other QP (wr_id 2) successful", got)
	}
	if _, ok := got[1]; ok {
		t.Fatalf("the sending QP's own receive (wr_id 1) completed: the SEND landed there: %v", got)
	}
	for i := range 64 {
		if y.buf[i] != byte(i+1) {
			t.Fatalf("the receiving QP's buffer holds %x, want what was sent", y.buf[:64])
		}
	}
}

// connectTo brings qp to RTS connected to QP dest at lid (RC: INIT, RTR,
// RTS).
func connectTo(qp *verbs.QP, dest uint32, lid uint16, mtu verbs.MTU) error {
	a := verbs.ExpQPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(verbs.AccessLocalWrite)}
	if err := verbs.ExpModifyQP(qp, &a, uint64(verbs.ExpQPState|verbs.ExpQPPkeyIndex|verbs.ExpQPPort|verbs.ExpQPAccessFlags)); err != nil {
		return fmt.Errorf("INIT: %w", err)
	}
	a = verbs.ExpQPAttr{QPState: verbs.QpsRtr, PathMTU: mtu, DestQPNum: dest, MaxDestRdAtomic: 1, MinRnrTimer: 12}
	a.AHAttr.Dlid, a.AHAttr.PortNum = lid, 1
	if err := verbs.ExpModifyQP(qp, &a, uint64(verbs.ExpQPState|verbs.ExpQPAv|verbs.ExpQPPathMTU|verbs.ExpQPDestQPN|
		verbs.ExpQPRQPSN|verbs.ExpQPMaxDestRdAtomic|verbs.ExpQPMinRnrTimer)); err != nil {
		return fmt.Errorf("RTR: %w", err)
	}
	a = verbs.ExpQPAttr{QPState: verbs.QpsRts, Timeout: 14, RetryCnt: 7, RnrRetry: 7, MaxRdAtomic: 1}
	if err := verbs.ExpModifyQP(qp, &a, uint64(verbs.ExpQPState|verbs.ExpQPTimeout|verbs.ExpQPRetryCnt|verbs.ExpQPRnrRetry|
		verbs.ExpQPSQPSN|verbs.ExpQPMaxQPRdAtomic)); err != nil {
		return fmt.Errorf("RTS: %w", err)
	}
	return nil
}
