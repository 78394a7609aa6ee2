//go:build linux && cgo

// Package pmix is coll's exchange over a launcher's PMIx server: the
// way MPI libraries trade queue-pair addresses when Open MPI's mpirun or
// Slurm's srun --mpi=pmix starts a job. Each process is a PMIx client
// (PMIx_Init); its rank comes from PMIx and the job's size from
// PMIX_JOB_SIZE, and each round of Exchange puts this rank's bytes under
// a key of its own (PMIx_Put, PMIx_Commit), waits at a fence that
// collects every rank's (PMIx_Fence with PMIX_COLLECT_DATA and
// PMIX_TIMEOUT) and reads them back (PMIx_Get). A round that does not
// complete by the deadline, or that a rank left, fails naming the ranks
// that published nothing for it.
//
// Importing the package registers it with coll.FromEnv:
//
//	import _ "github.com/verbsexp/verbsexp/runtime/coll/pmix"
//
// It binds libpmix with cgo (pkg-config pmix; Debian: libpmix-dev), the
// one part of the module that needs it.
package pmix

/*
#cgo pkg-config: pmix
#include <pmix.h>
#include <stdlib.h>
#include <string.h>

// vx_init starts the client: this process's namespace and rank, and the
// job's size.
static pmix_status_t vx_init(char nspace[PMIX_MAX_NSLEN + 1], uint32_t *rank, uint32_t *size, uint16_t *type) {
	pmix_proc_t me, job;
	pmix_value_t *v = NULL;
	pmix_status_t rc = PMIx_Init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) return rc;
	memcpy(nspace, me.nspace, PMIX_MAX_NSLEN + 1);
	*rank = me.rank;
	PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
	rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
	if (rc != PMIX_SUCCESS) return rc;
	*type = v->type;
	if (v->type == PMIX_UINT32) *size = v->data.uint32;
	PMIX_VALUE_RELEASE(v);
	return PMIX_SUCCESS;
}

// vx_put publishes n bytes under key for every rank and commits them.
static pmix_status_t vx_put(const char *key, void *bytes, size_t n) {
	pmix_value_t val;
	PMIX_VALUE_CONSTRUCT(&val);
	val.type = PMIX_BYTE_OBJECT;
	val.data.bo.bytes = bytes;
	val.data.bo.size = n;
	pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &val); // copies the bytes
	if (rc != PMIX_SUCCESS) return rc;
	return PMIx_Commit();
}

// vx_fence waits for every rank of nspace, collecting what they put,
// for at most timeout seconds.
static pmix_status_t vx_fence(const char *nspace, int timeout) {
	pmix_proc_t all;
	pmix_info_t info[2];
	bool collect = true;
	PMIX_LOAD_PROCID(&all, nspace, PMIX_RANK_WILDCARD);
	PMIX_INFO_CONSTRUCT(&info[0]);
	PMIX_INFO_CONSTRUCT(&info[1]);
	PMIx_Info_load(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	PMIx_Info_load(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
	pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	return rc;
}

// vx_get reads what rank put under key, from what this client already
// holds (PMIX_IMMEDIATE: it never waits), into malloc'd memory.
static pmix_status_t vx_get(const char *nspace, uint32_t rank, const char *key, void **out, size_t *n) {
	pmix_proc_t p;
	pmix_info_t info;
	pmix_value_t *v = NULL;
	bool immediate = true;
	PMIX_LOAD_PROCID(&p, nspace, rank);
	PMIX_INFO_CONSTRUCT(&info);
	PMIx_Info_load(&info, PMIX_IMMEDIATE, &immediate, PMIX_BOOL);
	pmix_status_t rc = PMIx_Get(&p, key, &info, 1, &v);
	PMIX_INFO_DESTRUCT(&info);
	if (rc != PMIX_SUCCESS) return rc;
	if (v->type != PMIX_BYTE_OBJECT) {
		PMIX_VALUE_RELEASE(v);
		return PMIX_ERR_TYPE_MISMATCH;
	}
	*n = v->data.bo.size;
	*out = malloc(*n ? *n : 1);
	if (*out == NULL) {
		PMIX_VALUE_RELEASE(v);
		return PMIX_ERR_NOMEM;
	}
	if (*n) memcpy(*out, v->data.bo.bytes, *n);
	PMIX_VALUE_RELEASE(v);
	return PMIX_SUCCESS;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/ranklist"
)

func init() {
	coll.RegisterPMIx(func(timeout time.Duration) (coll.Member, error) { return Init(Options{Timeout: timeout}) })
}

// Options tune a client. The zero value is usable.
type Options struct {
	// Timeout bounds each round (PMIX_TIMEOUT, in whole seconds, at
	// least one); default a minute.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = time.Minute

// Client is this process's connection to the launcher's PMIx server.
type Client struct {
	nspace     string
	rank, size int
	timeout    time.Duration
	mu         sync.Mutex // one round at a time; closed
	closed     bool
	err        error // a failed round ends the exchange
}

// rounds counts the process's rounds, so that every round's key is its
// own even across clients: every rank makes the same calls in the same
// order.
var rounds struct {
	sync.Mutex
	n int
}

// Status is a PMIx status code other than success.
type Status int

func (s Status) Error() string { return C.GoString(C.PMIx_Error_string(C.pmix_status_t(s))) }

// Init connects to the launcher's PMIx server (PMIx_Init) and reads the
// job's size. A process started without a PMIx server fails here.
func Init(opts Options) (*Client, error) {
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("pmix: Timeout %v: need 0 (default) or more", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	var ns [C.PMIX_MAX_NSLEN + 1]C.char
	var rank, size C.uint32_t
	var typ C.uint16_t
	if rc := C.vx_init(&ns[0], &rank, &size, &typ); rc != C.PMIX_SUCCESS {
		err := fmt.Errorf("pmix: PMIx_Init: %w (is the process started by mpirun or srun --mpi=pmix?)", Status(rc))
		if C.PMIx_Initialized() != 0 {
			C.PMIx_Finalize(nil, 0)
		}
		return nil, err
	}
	c := &Client{nspace: C.GoString(&ns[0]), rank: int(rank), size: int(size), timeout: opts.Timeout}
	if typ != C.PMIX_UINT32 || c.size < 1 || c.rank >= c.size {
		C.PMIx_Finalize(nil, 0)
		return nil, fmt.Errorf("pmix: the server says rank %d of %d (PMIX_JOB_SIZE of type %d): not a rank of the job", c.rank, c.size, typ)
	}
	return c, nil
}

// Rank and Size are this process's rank and the job's size.
func (c *Client) Rank() int { return c.rank }
func (c *Client) Size() int { return c.size }

// Namespace is the job's PMIx namespace.
func (c *Client) Namespace() string { return c.nspace }

// Exchange publishes local for the next round and returns every rank's
// bytes, indexed by rank. Every rank calls it the same number of times.
func (c *Client) Exchange(local []byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("pmix: Exchange on a closed client")
	}
	if c.err != nil {
		return nil, c.err
	}
	rounds.Lock()
	rounds.n++
	round := rounds.n
	rounds.Unlock()
	all, err := c.exchange(round, local)
	if err != nil {
		c.err = fmt.Errorf("pmix: rank %d of %d (namespace %s): round %d: %w", c.rank, c.size, c.nspace, round, err)
		return nil, c.err
	}
	return all, nil
}

func (c *Client) exchange(round int, local []byte) ([][]byte, error) {
	key := C.CString(fmt.Sprintf("verbsexp.coll.%d", round))
	defer C.free(unsafe.Pointer(key))
	ns := C.CString(c.nspace)
	defer C.free(unsafe.Pointer(ns))
	var p unsafe.Pointer
	if len(local) > 0 {
		p = unsafe.Pointer(&local[0])
	}
	if rc := C.vx_put(key, p, C.size_t(len(local))); rc != C.PMIX_SUCCESS {
		return nil, fmt.Errorf("PMIx_Put or PMIx_Commit: %w", Status(rc))
	}
	secs := int(math.Ceil(c.timeout.Seconds()))
	start := time.Now()
	if rc := C.vx_fence(ns, C.int(max(secs, 1))); rc != C.PMIX_SUCCESS {
		why := fmt.Sprintf("PMIx_Fence after %v: %v", time.Since(start).Round(time.Millisecond), Status(rc))
		missing := c.missing(ns, key)
		switch {
		case len(missing) > 0 && rc == C.PMIX_ERR_TIMEOUT:
			return nil, fmt.Errorf("%s: %s published nothing for this round within %v (still starting, or stuck?)", why, ranklist.Format(missing), c.timeout)
		case len(missing) > 0:
			return nil, fmt.Errorf("%s: %s published nothing for this round and the launcher reports ranks gone (exited or killed?)", why, ranklist.Format(missing))
		}
		return nil, errors.New(why)
	}
	all := make([][]byte, c.size)
	var missing []int
	for r := range all {
		b, rc := c.get(ns, r, key)
		switch rc {
		case C.PMIX_SUCCESS:
			all[r] = b
		case C.PMIX_ERR_NOT_FOUND:
			missing = append(missing, r)
		default:
			return nil, fmt.Errorf("PMIx_Get of rank %d's bytes after the fence: %w", r, Status(rc))
		}
	}
	if len(missing) > 0 { // the server ended the fence without them: they are gone
		return nil, fmt.Errorf("%s published nothing for this round, and the fence completed without them (exited or killed?)", ranklist.Format(missing))
	}
	return all, nil
}

func (c *Client) get(ns *C.char, rank int, key *C.char) ([]byte, C.pmix_status_t) {
	var out unsafe.Pointer
	var n C.size_t
	rc := C.vx_get(ns, C.uint32_t(rank), key, &out, &n)
	if rc != C.PMIX_SUCCESS {
		return nil, rc
	}
	defer C.free(out)
	return C.GoBytes(out, C.int(n)), rc
}

// missing is the ranks whose bytes for key this client cannot see.
func (c *Client) missing(ns, key *C.char) []int {
	var ranks []int
	for r := range c.size {
		if _, rc := c.get(ns, r, key); rc != C.PMIX_SUCCESS {
			ranks = append(ranks, r)
		}
	}
	return ranks
}

// Close finalizes the client (PMIx_Finalize), which the launcher expects
// of every process before it exits. A second Close is an error.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pmix: client closed twice")
	}
	c.closed = true
	if rc := C.PMIx_Finalize(nil, 0); rc != C.PMIX_SUCCESS {
		return fmt.Errorf("pmix: PMIx_Finalize: %w", Status(rc))
	}
	return nil
}
