//go:build linux && cgo

package device

import "github.com/verbsexp/verbsexp/generated/verbs"

type cqConfig struct {
	crossChannel  bool
	ignoreOverrun bool
	waitable      bool
}

// CQOption configures CreateCQ.
type CQOption func(*cqConfig)

// CrossChannelCQ creates the CQ with IBV_EXP_CQ_CREATE_CROSS_CHANNEL,
// for CQs that CQE_WAITs watch. Such a CQ, like one with IgnoreOverrun,
// never overruns (as the mlx5 driver sets it up): a CQE that finds the
// ring full is written over the oldest unpolled one.
func CrossChannelCQ() CQOption { return func(c *cqConfig) { c.crossChannel = true } }

// IgnoreOverrun sets IBV_EXP_CQ_IGNORE_OVERRUN with ibv_exp_modify_cq
// after creation (the only place the headers offer it).
func IgnoreOverrun() CQOption { return func(c *cqConfig) { c.ignoreOverrun = true } }

// Waitable gives the CQ a completion channel of its own, so that WaitCQ
// and PollCQ can sleep until it has a completion instead of spinning.
func Waitable() CQOption { return func(c *cqConfig) { c.waitable = true } }

// Caps are the capacities of a QP's queues (struct ibv_qp_cap).
type Caps struct {
	SendWR, RecvWR   int // ring slots
	SendSGE, RecvSGE int // SGEs per WQE
	Inline           int // bytes of IBV_SEND_INLINE payload per send WQE
}

// DefaultCaps are the capacities CreateQP uses without QPCaps.
var DefaultCaps = Caps{SendWR: 64, RecvWR: 64, SendSGE: 4, RecvSGE: 4, Inline: 64}

type qpConfig struct {
	flags  verbs.ExpQPCreateFlags
	caps   Caps
	sigAll bool
	qpType verbs.QPType
	srq    *verbs.SRQ
}

// QPOption configures CreateQP.
type QPOption func(*qpConfig)

// CrossChannel sets IBV_EXP_QP_CREATE_CROSS_CHANNEL: the QP may post
// CQE_WAIT, SEND_ENABLE, RECV_ENABLE and calc WRs.
func CrossChannel() QPOption {
	return func(c *qpConfig) { c.flags |= verbs.ExpQPCreateCrossChannel }
}

// ManagedSend sets IBV_EXP_QP_CREATE_MANAGED_SEND: send WQEs run only
// once a SEND_ENABLE posted by a cross-channel QP has released them.
func ManagedSend() QPOption {
	return func(c *qpConfig) { c.flags |= verbs.ExpQPCreateManagedSend }
}

// ManagedRecv sets IBV_EXP_QP_CREATE_MANAGED_RECV: receive WQEs accept
// data only once a RECV_ENABLE has released them.
func ManagedRecv() QPOption {
	return func(c *qpConfig) { c.flags |= verbs.ExpQPCreateManagedRecv }
}

// QPCaps sets the queue capacities (DefaultCaps without it).
func QPCaps(c Caps) QPOption { return func(q *qpConfig) { q.caps = c } }

// SigAll sets sq_sig_all: every send WQE completes, signaled or not.
func SigAll() QPOption { return func(c *qpConfig) { c.sigAll = true } }

// Transport sets the QP's type: verbs.QptRC (the default), verbs.QptUC
// (unreliable connected) or verbs.QptUD (datagrams, addressed per work
// request with an address handle). What else a device refuses, it
// refuses with EINVAL.
func Transport(t verbs.QPType) QPOption { return func(c *qpConfig) { c.qpType = t } }

// SRQ attaches the QP to a shared receive queue: its receives come from
// there, and it has no receive queue of its own.
func SRQ(srq *verbs.SRQ) QPOption { return func(c *qpConfig) { c.srq = srq } }
