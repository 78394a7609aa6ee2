//go:build linux && cgo

package softdev

import (
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// WAIT_EN_LAST on a data opcode is ignored, as mlx4 and mlx5 ignore it:
// the send posts and runs, and no base moves (here: the manager's next
// enable still counts from 0).
func TestWaitEnLastOnSendIsIgnored(t *testing.T) {
	v := newVD(t)
	v.initTest(vdWith(verbs.ExpQPCreateCrossChannel | verbs.ExpQPCreateManagedSend))
	sge := vdC[verbs.SGE](v)
	*sge = verbs.SGE{Addr: v.addr(0), Length: 8, Lkey: v.mr.Lkey}
	for i := range 2 {
		w := vdC[verbs.ExpSendWR](v)
		w.WRID, w.ExpOpcode, w.SGList, w.NumSGE = uint64(i), verbs.ExpWRSend, sge, 1
		w.ExpSendFlags = uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)
		if err := verbs.ExpPostSend(v.qp, w, nil); err != nil {
			t.Fatalf("SEND with WAIT_EN_LAST: %v", err)
		}
	}
	v.postMgr(v.enable(9, verbs.ExpWRSendEnable, 1, verbs.ExpSendWaitEnLast))
	if s := v.poll(v.scq, v.cqTx); len(s) != 1 || s[0].WRID != 0 || s[0].Status != verbs.WCSuccess {
		t.Fatalf("send CQ %+v, want the first send only", s)
	}
}
