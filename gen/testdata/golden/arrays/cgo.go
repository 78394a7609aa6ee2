//go:build cgo

package arrays

// Hand-written C side of cgo_test.go: a CQ in C memory, and the exported
// list functions, provided (dynlib.Provide) in place of libibverbs':
// ibv_get_device_list returns two named devices in a malloc'd array and
// ibv_free_device_list counts the arrays it frees.

/*
#include <stdlib.h>
#include <string.h>
#include "arrays.h"

static struct ibv_device devs[2] = {{"dev0"}, {"dev1"}};
static long frees;

struct ibv_device **test_get_device_list(int *num_devices) {
	struct ibv_device **l = calloc(3, sizeof *l);
	l[0] = &devs[0];
	l[1] = &devs[1];
	if (num_devices != NULL)
		*num_devices = 2;
	return l;
}

void test_free_device_list(struct ibv_device **list) { frees++; free(list); }
static long test_frees(void) { return frees; }
static struct ibv_cq *new_cq(int ready) { struct ibv_cq *cq = calloc(1, sizeof *cq); cq->ready = ready; return cq; }
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
)

var provide = sync.OnceValue(func() error {
	if err := dynlib.Provide("libibverbs.so.1", "", "ibv_get_device_list", C.test_get_device_list); err != nil {
		return err
	}
	return dynlib.Provide("libibverbs.so.1", "", "ibv_free_device_list", C.test_free_device_list)
})

func listFrees() int { return int(C.test_frees()) }

func newCQ(ready int) *CQ { return (*CQ)(unsafe.Pointer(C.new_cq(C.int(ready)))) }

func freeCQ(cq *CQ) { C.free(unsafe.Pointer(cq)) }
