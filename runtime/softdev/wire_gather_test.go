//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// TestWireGathersPayloads: a payload of 1 KiB or more leaves from the MR
// it is in (sendmsg gathers it after its header), unless the socket is
// full: then it is copied into the send buffer before the device lock is
// released, since the application may reuse its memory after that. A
// raw peer reads nothing at first, so that the socket fills; then it
// reads every frame. Each must carry its WRITE's bytes at its offset, in
// PSN order, whether it left gathered, copied after a full socket, or
// copied from the start (a frame over more than four scatter/gather
// entries, a small payload). The peer's ACK then completes every WRITE.
func TestWireGathersPayloads(t *testing.T) {
	f := newFixture(t)
	p := newHeldRawPeer(t, 0, 1<<13)
	const mib = 1 << 20
	src := callocSlice[byte](16 * mib)
	f.free = append(f.free, unsafe.Pointer(&src[0]))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	mr := f.reg(src, verbs.AccessLocalWrite)

	cq := f.cq(64)
	caps := device.DefaultCaps
	caps.SendSGE = 8
	qp := f.qp(cq, cq, device.QPCaps(caps))
	l := defaultLink()
	l.mtu, l.timeout, l.sqPSN = verbs.MTU4096, 0, 500 // timeout 0: no retransmission while the peer reads nothing
	connectOne(t, qp, 0x4242, p.gid(), l)

	// The WRITEs: ten of 1 MiB in one piece each (more than the socket
	// holds), one over three pieces of odd sizes, one whose first frame
	// spans seven pieces, one of 100 bytes.
	type write struct {
		pieces [][2]int // offset, length in src
		remote uint64
	}
	var writes []write
	for i := range 10 {
		writes = append(writes, write{pieces: [][2]int{{i * mib, mib}}})
	}
	writes = append(writes, write{pieces: [][2]int{{10*mib + 3, 1000}, {10*mib + 2000, 3001}, {10*mib + 9000, 50001}}})
	var seven [][2]int
	for i := range 8 {
		seven = append(seven, [2]int{11*mib + 1000*i, 600})
	}
	writes = append(writes, write{pieces: seven}, write{pieces: [][2]int{{12 * mib, 100}}})
	want := make([][]byte, len(writes))
	for i := range writes {
		w := &writes[i]
		w.remote = 1<<40 + uint64(i)<<24
		for _, pc := range w.pieces {
			want[i] = append(want[i], src[pc[0]:pc[0]+pc[1]]...)
		}
		wr := f.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sgesOver(src, mr.Lkey, w.pieces...), len(w.pieces))
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = w.remote, 0x77
		f.postSend(qp, wr)
	}
	waitFor(t, func() bool { w := f.d.Wire(); return w.Gathered > 0 && w.GatherCopies > 0 },
		"payloads sent gathered and others copied after the socket filled: %+v", f.d.Wire())

	p.release()
	psn := uint32(500)
	for i, w := range writes {
		n := (len(want[i]) + 4095) / 4096
		for k := range n {
			b := p.answer(t)
			op, fpsn, va, plen := b[0]&0x1f, le32(b[12:]), binary.LittleEndian.Uint64(b[24:]), le32(b[16:])
			var wantOp uint8 = pktWriteMiddle
			switch {
			case n == 1:
				wantOp = pktWriteOnly
			case k == 0:
				wantOp = pktWriteFirst
			case k == n-1:
				wantOp = pktWriteLast
			}
			off := k * 4096
			end := min(off+4096, len(want[i]))
			var wantVA uint64 // in the first frame only (the RETH)
			if k == 0 {
				wantVA = w.remote
			}
			if op != wantOp || fpsn != psn || va != wantVA || int(plen) != end-off {
				t.Fatalf("WRITE %d, frame %d of %d: op %d psn %d va %#x length %d, want op %d psn %d va %#x length %d",
					i, k, n, op, fpsn, va, plen, wantOp, psn, wantVA, end-off)
			}
			if !bytes.Equal(b[64:], want[i][off:end]) {
				t.Fatalf("WRITE %d, frame %d of %d (psn %d): payload differs from the source at byte %d", i, k, n, fpsn, firstDiff(b[64:], want[i][off:end]))
			}
			psn++
		}
	}
	select {
	case b := <-p.in:
		t.Fatalf("a frame past the last WRITE's: op %d psn %d", b[0]&0x1f, le32(b[12:]))
	case <-time.After(50 * time.Millisecond):
	}
	wire := f.d.Wire()
	t.Logf("%d payloads gathered, %d of them copied after a full socket", wire.Gathered, wire.GatherCopies)
	if wire.Gathered <= wire.GatherCopies {
		t.Errorf("every gathered payload was copied after all (%d of %d)", wire.GatherCopies, wire.Gathered)
	}

	c := p.open(f.d, 0)
	c.Write(frame{op: pktAck, dst: qp.QPNum, src: 0x4242, psn: psn - 1}.bytes())
	for i, wc := range f.pollFor(cq, len(writes)) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, sum([]verbs.ExpWC{wc}))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
