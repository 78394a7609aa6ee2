//go:build linux && cgo

package softdev

/*
#include <malloc.h>
#include <stdlib.h>
#include "engine.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// KeyEnv names the wire key: 32 to 128 hex digits, one secret for every
// device that talks to this one (see the package doc, "The network
// device"). Without it, KeyFileEnv, else the user's own key file.
const KeyEnv = "VERBSEXP_SOFTDEV_KEY"

// KeyFileEnv names a file holding the wire key in hex, used when KeyEnv
// is unset. It must belong to the user and be readable by no one else.
const KeyFileEnv = "VERBSEXP_SOFTDEV_KEY_FILE"

// WireGuard counts what a device's wire refused or shed to stay
// reachable by its peers, and the connections it holds now.
type WireGuard struct {
	AuthRefused  uint64 // connections closed because the other end did not prove the wire key, or spoke no handshake (a stranger, a device with another key, an older softdev)
	HelloExpired uint64 // connections whose handshake was not over within 2 s
	Refused      uint64 // accepted connections closed at once: over a limit, with nothing that could go instead
	Evicted      uint64 // connections closed to make room: the oldest still in their handshake, or the least recently used that carry no link
	AcceptPauses uint64 // times accept(2) found no file descriptor or memory left, and the listener rested (50 ms, doubling up to 1 s) instead of being woken for the same connection again at once
	In           int    // accepted connections that authenticated
	Out          int    // connections this device opened
	Hellos       int    // accepted connections still in their handshake
}

func wireGuard(g *C.struct_sd_wire_guard) WireGuard {
	return WireGuard{AuthRefused: uint64(g.auth_refused), HelloExpired: uint64(g.hello_expired), Refused: uint64(g.refused),
		Evicted: uint64(g.evicted), AcceptPauses: uint64(g.accept_pauses), In: int(g.in), Out: int(g.out), Hellos: int(g.hellos)}
}

// errWireKey is sd_open's error when the device has no wire key.
const errWireKey = int(C.SD_ERR_WIRE_KEY)

// wireKeyErr is Open's error for errWireKey: the C side's account of
// what was wrong and what to do.
func wireKeyErr() error {
	var b [4096]C.char
	C.sd_wire_key_error(&b[0], C.size_t(len(b)))
	return fmt.Errorf("softdev: open: %s: %w", C.GoString(&b[0]), syscall.EACCES)
}

func init() {
	C.sd_wire_key_quiet() // Open returns the message (wireKeyErr)
}

// wireKey is the key a device opened now would use, as the C side finds
// it (tests: a raw peer must prove it as a device does).
func wireKey() ([]byte, error) {
	var key [C.SD_KEY_MAX]C.uint8_t
	var n C.size_t
	var msg [4096]C.char
	if e := C.sd_wire_key(&key[0], &n, &msg[0], C.size_t(len(msg))); e > 0 {
		return nil, fmt.Errorf("%s: %w", C.GoString(&msg[0]), syscall.Errno(e))
	} else if e != 0 {
		return nil, fmt.Errorf("%s", C.GoString(&msg[0]))
	}
	return C.GoBytes(unsafe.Pointer(&key[0]), C.int(n)), nil
}

// cHeapInUse is what the C heap has handed out and not taken back,
// mmapped chunks included (mallinfo2): what this process's devices hold
// (tests: what strangers' connections pin).
func cHeapInUse() uint64 {
	m := C.mallinfo2()
	return uint64(m.uordblks) + uint64(m.hblkhd)
}

// hmacSHA256 is the C side's HMAC-SHA256 (tests: RFC 4231's vectors).
func hmacSHA256(key, msg []byte) [32]byte {
	var out [32]byte
	ck := C.CBytes(append([]byte{0}, key...))
	cm := C.CBytes(append([]byte{0}, msg...))
	defer C.free(ck)
	defer C.free(cm)
	C.sd_hmac_sha256((*C.uint8_t)(unsafe.Add(ck, 1)), C.size_t(len(key)), (*C.uint8_t)(unsafe.Add(cm, 1)), C.size_t(len(msg)),
		(*C.uint8_t)(unsafe.Pointer(&out[0])))
	return out
}
