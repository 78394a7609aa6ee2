//go:build linux && cgo

package softdev

import (
	"errors"
	"math"
	"os"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// Misuse of the device's objects is an error, never a crash: a QP or CQ
// destroyed, nil, or of another device is refused with EINVAL by the
// Device methods and by the verbs that reach the provider.
func TestStaleAndForeignObjects(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t)
	cq, err := f.d.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := f.d.CreateQP(f.pd, cq, cq)
	if err != nil {
		t.Fatal(err)
	}
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	theirs := other.pair(nil, nil).a
	if err := f.d.DestroyQP(theirs); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("DestroyQP of another device's QP: %v", err)
	}
	if _, s, _, err := other.d.QPStats(theirs); err != nil || s.Posted != 0 {
		t.Fatalf("the other device's QP after the refused destroy: %v", err)
	}
	if err := f.d.DestroyQP(nil); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("DestroyQP(nil): %v", err)
	}
	if err := f.d.DestroyCQ(nil); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("DestroyCQ(nil): %v", err)
	}
	if err := f.d.DestroyQP(qp); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DestroyQP(qp); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("second DestroyQP: %v", err)
	}
	// Every verb on the destroyed QP, through the generated wrappers.
	w := f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
	bad := alloc[*verbs.ExpSendWR](f)
	if err := verbs.ExpPostSend(qp, w, bad); !isErrno(err, syscall.EINVAL) || *bad != w {
		t.Fatalf("ExpPostSend on a destroyed QP: %v", err)
	}
	lw := alloc[verbs.SendWR](f)
	lbad := alloc[*verbs.SendWR](f)
	if err := verbs.PostSend(qp, lw, lbad); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("PostSend on a destroyed QP: %v", err)
	}
	rbad := alloc[*verbs.RecvWR](f)
	if err := verbs.PostRecv(qp, f.recv(1, f.sges(f.mr.Lkey, [2]int{0, 8}), 1), rbad); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("PostRecv on a destroyed QP: %v", err)
	}
	attr := alloc[verbs.ExpQPAttr](f)
	attr.QPState = verbs.QpsErr
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState)); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("ExpModifyQP on a destroyed QP: %v", err)
	}
	if _, _, _, err := f.d.QPStats(qp); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("QPStats of a destroyed QP: %v", err)
	}
	m, _ := f.mgr()
	en := f.enable(2, verbs.ExpWRSendEnable, qp, 1, 0)
	if err := verbs.ExpPostSend(m, en, bad); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("enable of a destroyed QP: %v", err)
	}
	tasks := allocN[verbs.ExpTask](f, 1)
	tasks[0].TaskType, tasks[0].Item.QP = verbs.ExpTaskSend, qp
	tasks[0].Item.SetSendWR(w)
	tbad := alloc[*verbs.ExpTask](f)
	if err := verbs.ExpPostTask(f.d.Context(), &tasks[0], tbad); !isErrno(err, syscall.EINVAL) || *tbad != &tasks[0] {
		t.Fatalf("post_task on a destroyed QP: %v", err)
	}

	// The CQ.
	if err := f.d.DestroyCQ(cq); err != nil {
		t.Fatal(err)
	}
	wc := allocN[verbs.ExpWC](f, 4)
	if _, err := verbs.ExpPollCQ(cq, wc[:4]); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("ExpPollCQ on a destroyed CQ: %v", err)
	}
	lwc := allocN[verbs.WC](f, 4)
	if _, err := verbs.PollCQ(cq, lwc[:4]); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("PollCQ on a destroyed CQ: %v", err)
	}
	if err := f.d.DestroyCQ(cq); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("second DestroyCQ: %v", err)
	}
	if _, err := f.d.CQStats(cq); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("CQStats of a destroyed CQ: %v", err)
	}
	if _, err := f.d.CreateQP(f.pd, cq, cq); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("CreateQP on a destroyed CQ: %v", err)
	}
	if err := verbs.ExpPostSend(m, f.wait(3, cq, 1, 0), bad); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("wait on a destroyed CQ: %v", err)
	}
	if err := f.d.DestroyCQ(other.cq(4)); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("DestroyCQ of another device's CQ: %v", err)
	}
}

// A registration of memory that is not mapped (or not writable, for a
// writable MR) fails at once with EFAULT, as an HCA's pinning does.
func TestRegMRNeedsMappedMemory(t *testing.T) {
	f := newFixture(t)
	small := allocN[byte](f, 64)
	if _, err := verbs.RegMR(f.pd, unsafe.Pointer(&small[0]), 1<<40, int32(verbs.AccessLocalWrite)); !isErrno(err, syscall.EFAULT) {
		t.Fatalf("RegMR of 64 bytes as 1 TiB: %v", err)
	}
	pg := os.Getpagesize()
	all, err := syscall.Mmap(-1, 0, 4*pg, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(all)
	// A hole after three pages: unmap the fourth (behind the back of
	// syscall.Munmap, which only takes whole mappings).
	if _, _, e := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(unsafe.Pointer(&all[3*pg])), uintptr(pg), 0); e != 0 {
		t.Fatal(e)
	}
	mem := all[:3*pg]
	if err := syscall.Mprotect(mem[pg:2*pg], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[2*pg:], syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	base := unsafe.Pointer(&mem[0])
	for _, c := range []struct {
		name   string
		off, n int
		access verbs.AccessFlags
		want   error
	}{
		{"read-write page", 0, pg, verbs.AccessLocalWrite, nil},
		{"into a PROT_NONE page", pg - 8, 16, 0, syscall.EFAULT},
		{"read-only page, read access", 2 * pg, pg, verbs.AccessRemoteRead, nil},
		{"read-only page, write access", 2 * pg, pg, verbs.AccessLocalWrite, syscall.EFAULT},
		{"past the mapping", 2 * pg, 2 * pg, 0, syscall.EFAULT},
	} {
		mr, err := f.d.RegMR(f.pd, mem[c.off:c.off+c.n], c.access)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if err := f.d.DeregMR(mr); err != nil {
				t.Error(err)
			}
		} else if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// The fallback (no /proc) sees holes too.
	if err := checkMappedMsync(uintptr(base), uintptr(1<<40)); !errors.Is(err, syscall.EFAULT) {
		t.Errorf("msync check of a 1 TiB range: %v", err)
	}
	if err := checkMappedMsync(uintptr(base), uintptr(3*pg)); err != nil {
		t.Errorf("msync check of the mapping: %v", err)
	}
}

// Sizes that do not fit the C fields are refused, not truncated.
func TestSizesThatDoNotFit(t *testing.T) {
	f := newFixture(t)
	for _, n := range []int{1<<32 + 1, math.MaxInt32 + 1, -1, 0} {
		if cq, err := f.d.CreateCQ(n); !isErrno(err, syscall.EINVAL) {
			t.Errorf("CreateCQ(%d) = %v, %v; want EINVAL", n, cq, err)
		}
	}
	if _, err := f.d.CreateCQ(DefaultLimits.MaxCQE + 1); !isErrno(err, syscall.EINVAL) {
		t.Errorf("CreateCQ above max_cqe: %v", err)
	}
	cq := f.cq(4)
	for _, c := range []device.Caps{{SendWR: 1<<32 + 4}, {RecvWR: -1}, {SendSGE: 1 << 40}, {SendWR: DefaultLimits.MaxQPWR + 1}} {
		if qp, err := f.d.CreateQP(f.pd, cq, cq, device.QPCaps(c)); !isErrno(err, syscall.EINVAL) {
			t.Errorf("CreateQP with %+v = %v, %v; want EINVAL", c, qp, err)
		}
	}
	// Limits can be raised at Open (up to 1<<24) and are reported.
	d, err := Open(MaxQPWR(1<<16), MaxCQE(1<<21))
	if err != nil {
		t.Fatal(err)
	}
	if l := d.Limits(); l.MaxQPWR != 1<<16 || l.MaxCQE != 1<<21 {
		t.Errorf("limits %+v", l)
	}
	d.Close()
	if _, err := Open(MaxQPWR(1 << 30)); !isErrno(err, syscall.EINVAL) {
		t.Errorf("Open with max_qp_wr 1<<30: %v", err)
	}
}
