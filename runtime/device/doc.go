// Package device is the runtime's resource layer: one way to open a
// verbs device and to create what a schedule runs on, whatever the
// device is: an HCA through libibverbs, softdev under `softdev exec`
// behind the vendor's libibverbs (the same code path), or the software
// device in this process (runtime/softdev). Every resource goes through
// the generated package's verbs, so a program written against this
// package runs unchanged on all three; on the in-process device softdev
// supplies the exported verbs itself.
//
// # Opening
//
// Open("") opens the device $VERBSEXP_DEVICE names, else the first one
// libibverbs lists; Open(name) the one of that name. The name softdev
// (SoftdevName) is the in-process software device, which a program has
// when it imports runtime/softdev (a blank import will do); it runs by
// itself as an HCA does (softdev.Autonomous). A program that imports
// runtime/softdev runs on an HCA, and with VERBSEXP_DEVICE=softdev (in
// its tests, say) in process:
//
//	dev, err := device.Open("") // $VERBSEXP_DEVICE, else the first HCA
//	if err != nil {
//		log.Fatal(err) // it says which devices there are, or what to import
//	}
//	defer dev.Close()
//
// # Resources
//
// AllocPD, RegMR (of a byte slice that stays put: lease buffers, cmem),
// CreateCQ with options (CrossChannelCQ, IgnoreOverrun, Waitable) and
// CreateQP with options (ManagedSend, ManagedRecv, CrossChannel, QPCaps,
// SigAll, Transport, SRQ), and their Destroy and Dealloc verbs. The
// objects are the generated package's (*verbs.PD, *verbs.CQ, *verbs.QP),
// for task lists, leases and the verbs themselves. The Device keeps the
// objects it created: another device's, or one destroyed already, is
// refused with EINVAL instead of reaching a verb that would read freed
// memory, and Close of a libibverbs device says what was left
// (*LeakError; the software device counts its own).
//
// # Endpoints and connections
//
// An Endpoint (Device.Endpoint) is what a peer needs to connect to a QP:
// the port's LID and GID, the QP number, a random first PSN and the
// port's MTU; it travels as 35 bytes (MarshalBinary). Connect moves a QP
// to RTS towards a remote Endpoint with the attributes of an RC
// connection between hosts (LID addressing on InfiniBand, a GRH on
// Ethernet/RoCE); ConnectPair connects two QPs of this process.
//
// # Waiting
//
// A CQ created Waitable can be waited on without spinning: WaitCQ and
// PollCQ sleep in Go's runtime poller on the CQ's completion channel, as
// a net.Conn waits for data, and honour a context. See WaitCQ.
package device
