//go:build linux && cgo

package pmix_test

import (
	"fmt"
	"log"
	"os"

	"github.com/verbsexp/verbsexp/runtime/coll"
	_ "github.com/verbsexp/verbsexp/runtime/coll/pmix"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Example is one rank of a job as a launcher starts it: FromEnv finds
// the rank, the size and the exchange, New does the rest. Under mpirun
// or srun --mpi=pmix that is PMIx (this package, imported for its
// effect); go test runs no launcher, so the example sets what a
// torchrun-style launcher sets for a one-rank job, and the job's
// identity (which keeps two jobs given one address apart), and FromEnv
// picks the TCP rendezvous.
func Example() {
	for _, kv := range [][2]string{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
		{coll.JobIDEnv, "example-1"}} {
		os.Setenv(kv[0], kv[1])
		defer os.Unsetenv(kv[0])
	}
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	job, err := coll.FromEnv(coll.JobOptions{}) // PMIx under mpirun or srun --mpi=pmix; else the TCP rendezvous
	check(err)
	dev, err := softdev.Open() // each process opens its own device: an HCA (ibv_open_device), or softdev
	check(err)
	c, err := coll.New(dev.Context(), job.Rank(), job.Size(), job.Exchange, coll.Options{})
	check(err)
	barrier, err := c.Barrier()
	check(err)
	check(barrier.Post())
	check(barrier.Wait())
	fmt.Printf("rank %d of %d (%s): barrier done\n", job.Rank(), job.Size(), job.Launcher)
	check(barrier.Close())
	check(c.Close())
	check(dev.Close())
	check(job.Close()) // under PMIx: PMIx_Finalize, which the launcher expects before exit
	// Output: rank 0 of 1 (TCP rendezvous at 127.0.0.1:29500 (RANK, WORLD_SIZE), job VERBSEXP_JOB_ID=example-1): barrier done
}
