package coll

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll/rendezvous"
)

// Member is one process's place in a job a launcher started: its rank,
// the job's size and an exchange among the job's ranks (its Exchange
// method is an Exchange for New). Close it when the process is done
// with the job (after New, or at exit; under PMIx it finalizes the
// client, which the launcher expects before the process exits).
type Member interface {
	Rank() int
	Size() int
	Exchange(local []byte) ([][]byte, error)
	Close() error
}

// Job is what FromEnv found: the member and where it came from.
type Job struct {
	Member
	// Launcher names the source, as "PMIx" or "TCP rendezvous at
	// node01:29500 (RANK, WORLD_SIZE)", with ", job ID" after it when
	// the rendezvous has a job identity.
	Launcher string
}

// JobOptions tune FromEnv. The zero value is usable.
type JobOptions struct {
	// Timeout bounds each round of the exchange (New makes two); a
	// rank that never arrives fails every rank at this deadline, named.
	// Default rendezvous.DefaultTimeout (a minute), for PMIx too.
	Timeout time.Duration
	// Token is the TCP rendezvous's job secret; default the value of
	// TokenEnv. Required unless MASTER_ADDR is loopback; without one,
	// only processes of this user (or root) may join the job, checked
	// by the kernel (package rendezvous, "Without a token").
	Token []byte
	// Job is the TCP rendezvous's job identity (rendezvous.Options.Job):
	// two jobs given one MASTER_ADDR:MASTER_PORT refuse each other's
	// ranks. Default: what the launcher says, the first set of
	// JobIDEnv (VERBSEXP_JOB_ID), TORCHELASTIC_RUN_ID (unless "none",
	// torchrun's default without --rdzv-id), PMIX_NAMESPACE,
	// OMPI_MCA_ess_base_jobid, SLURM_JOB_ID with SLURM_STEP_ID, as
	// "NAME=value"; else one derived from the token; else none.
	Job string
}

// JobIDEnv is the environment variable that gives a job its identity
// for the TCP rendezvous when its launcher does not: the same on every
// rank, different for every job (scripts/rendezvous-job sets it).
const JobIDEnv = "VERBSEXP_JOB_ID"

// jobFromEnv is the job identity the launcher's variables give, or "".
func jobFromEnv() string {
	for _, name := range []string{JobIDEnv, "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"} {
		if v := os.Getenv(name); v != "" && !(name == "TORCHELASTIC_RUN_ID" && v == "none") {
			return name + "=" + v
		}
	}
	if job := os.Getenv("SLURM_JOB_ID"); job != "" {
		step := os.Getenv("SLURM_STEP_ID")
		if step == "" {
			step = os.Getenv("SLURM_STEPID")
		}
		if step != "" {
			return "SLURM_JOB_ID=" + job + " SLURM_STEP_ID=" + step
		}
		return "SLURM_JOB_ID=" + job
	}
	return ""
}

// TokenEnv is the environment variable FromEnv reads the rendezvous's
// token from: the launcher sets it, the same on every rank.
const TokenEnv = "VERBSEXP_JOB_TOKEN"

var pmix struct {
	sync.Mutex
	join func(timeout time.Duration) (Member, error)
}

// RegisterPMIx makes join FromEnv's way into a PMIx launcher. Package
// runtime/coll/pmix calls it when imported (import _
// "github.com/verbsexp/verbsexp/runtime/coll/pmix"), so that only
// programs that ask for PMIx link libpmix.
func RegisterPMIx(join func(timeout time.Duration) (Member, error)) {
	setPMIx(join)
}

func setPMIx(join func(timeout time.Duration) (Member, error)) (previous func(time.Duration) (Member, error)) {
	pmix.Lock()
	defer pmix.Unlock()
	previous, pmix.join = pmix.join, join
	return previous
}

// FromEnv finds the job this process belongs to from what its launcher
// set in the environment:
//
//   - MASTER_ADDR and MASTER_PORT (torchrun-style launchers, Kubernetes
//     operators, a shell loop): the TCP rendezvous (package
//     rendezvous) with rank 0 listening there, rank and size from RANK
//     and WORLD_SIZE, or else from OMPI_COMM_WORLD_RANK and _SIZE or
//     SLURM_PROCID and SLURM_NTASKS; the token from JobOptions.Token or
//     VERBSEXP_JOB_TOKEN (needed unless MASTER_ADDR is loopback, where
//     a job without one admits only this user's processes); the job's
//     identity from JobOptions.Job or the launcher (see JobOptions.Job),
//     so that two jobs given one address refuse each other's ranks (an
//     identity is not a secret: it keeps no one out).
//   - PMIX_NAMESPACE or PMIX_RANK (Open MPI's mpirun, srun --mpi=pmix):
//     the launcher's PMIx server, through package pmix, which must be
//     imported for it (it needs libpmix).
//
// Rank and size without an exchange, or nothing at all, is an error
// saying what was looked for.
func FromEnv(opts JobOptions) (*Job, error) {
	if opts.Timeout == 0 {
		opts.Timeout = rendezvous.DefaultTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("coll: FromEnv: Timeout %v: need 0 (default) or more", opts.Timeout)
	}
	addr, port := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")
	pmixSet := os.Getenv("PMIX_NAMESPACE") != "" || os.Getenv("PMIX_RANK") != ""
	switch {
	case addr != "" || port != "":
		if addr == "" || port == "" {
			return nil, fmt.Errorf("coll: FromEnv: MASTER_ADDR=%q and MASTER_PORT=%q: the TCP rendezvous needs both", addr, port)
		}
		rank, size, from, err := rankAndSize()
		if err != nil {
			return nil, err
		}
		if from == "" {
			return nil, fmt.Errorf("coll: FromEnv: MASTER_ADDR and MASTER_PORT are set but no rank and size: set RANK and WORLD_SIZE (or start the ranks under mpirun or srun)")
		}
		token := opts.Token
		if token == nil && os.Getenv(TokenEnv) != "" {
			token = []byte(os.Getenv(TokenEnv))
		}
		job := opts.Job
		if job == "" {
			job = jobFromEnv()
		}
		if len(job) > rendezvous.MaxJob {
			return nil, fmt.Errorf("coll: FromEnv: the job identity %.40q… is %d bytes, more than %d", job, len(job), rendezvous.MaxJob)
		}
		at := net.JoinHostPort(addr, port)
		r, err := rendezvous.Join(at, rank, size, rendezvous.Options{Token: token, Timeout: opts.Timeout, Job: job})
		if err != nil {
			return nil, fmt.Errorf("coll: FromEnv: rank %d of %d (%s): %w", rank, size, from, err)
		}
		launcher := fmt.Sprintf("TCP rendezvous at %s (%s)", at, from)
		if r.Job() != "" {
			launcher += ", job " + r.Job()
		}
		return &Job{Member: r, Launcher: launcher}, nil
	case pmixSet:
		pmix.Lock()
		join := pmix.join
		pmix.Unlock()
		if join == nil {
			return nil, errors.New(`coll: FromEnv: started under PMIx (PMIX_NAMESPACE is set: mpirun, or srun --mpi=pmix) but PMIx support is not linked in: ` +
				`import _ "github.com/verbsexp/verbsexp/runtime/coll/pmix" (needs libpmix: apt-get install libpmix-dev), or set MASTER_ADDR and MASTER_PORT for the TCP rendezvous`)
		}
		m, err := join(opts.Timeout)
		if err != nil {
			return nil, fmt.Errorf("coll: FromEnv: %w", err)
		}
		return &Job{Member: m, Launcher: "PMIx"}, nil
	}
	rank, size, from, err := rankAndSize()
	if err != nil {
		return nil, err
	}
	if from != "" {
		return nil, fmt.Errorf("coll: FromEnv: rank %d of %d from %s but no way to exchange endpoints: "+
			"set MASTER_ADDR and MASTER_PORT for the TCP rendezvous, or launch with PMIx (mpirun, srun --mpi=pmix)", rank, size, from)
	}
	return nil, errors.New("coll: FromEnv: no launcher found: looked for PMIx (PMIX_NAMESPACE, PMIX_RANK), Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), " +
		"Slurm (SLURM_PROCID, SLURM_NTASKS) and the TCP rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); start under mpirun or srun, or set those")
}

// rankAndSize reads the first pair of rank and size variables that is
// set, in order: RANK and WORLD_SIZE, Open MPI's, Slurm's; from names
// it ("" if none is).
func rankAndSize() (rank, size int, from string, err error) {
	for _, v := range [][2]string{{"RANK", "WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}} {
		r, s := os.Getenv(v[0]), os.Getenv(v[1])
		if r == "" && s == "" {
			continue
		}
		from = v[0] + ", " + v[1]
		if r == "" || s == "" {
			return 0, 0, "", fmt.Errorf("coll: FromEnv: %s=%q and %s=%q: need both", v[0], r, v[1], s)
		}
		rank, err1 := strconv.Atoi(r)
		size, err2 := strconv.Atoi(s)
		if err1 != nil || err2 != nil || size < 1 || rank < 0 || rank >= size {
			return 0, 0, "", fmt.Errorf("coll: FromEnv: %s=%q, %s=%q: need integers with 0 ≤ rank < size", v[0], r, v[1], s)
		}
		return rank, size, from, nil
	}
	return 0, 0, "", nil
}
