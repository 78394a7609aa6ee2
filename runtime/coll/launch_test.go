package coll_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll"
)

// launcherVars is every variable FromEnv reads.
var launcherVars = []string{"PMIX_NAMESPACE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", coll.TokenEnv,
	coll.JobIDEnv, "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEPID"}

// env clears every launcher variable for the test, then sets kv
// ("NAME=value" each).
func env(t *testing.T, kv ...string) {
	t.Helper()
	for _, v := range launcherVars {
		t.Setenv(v, "")
	}
	for _, s := range kv {
		name, value, _ := strings.Cut(s, "=")
		t.Setenv(name, value)
	}
}

// freePort is a loopback port nobody listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// TestFromEnvRefuses: without a launcher, and with one set up wrong,
// FromEnv says in one line what it looked for or what is missing.
func TestFromEnvRefuses(t *testing.T) {
	for _, tc := range []struct {
		what string
		env  []string
		says []string
	}{
		{"nothing", nil, []string{"no launcher found", "PMIX_NAMESPACE, PMIX_RANK", "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE",
			"SLURM_PROCID, SLURM_NTASKS", "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"}},
		{"PMIx without the package", []string{"PMIX_NAMESPACE=1234", "PMIX_RANK=0", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"},
			[]string{`import _ "github.com/verbsexp/verbsexp/runtime/coll/pmix"`, "libpmix-dev", "MASTER_ADDR and MASTER_PORT"}},
		{"Open MPI without an exchange", []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4"},
			[]string{"rank 1 of 4 from OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE but no way to exchange", "MASTER_ADDR and MASTER_PORT"}},
		{"Slurm without an exchange", []string{"SLURM_PROCID=3", "SLURM_NTASKS=8"},
			[]string{"rank 3 of 8 from SLURM_PROCID, SLURM_NTASKS", "srun --mpi=pmix"}},
		{"a rendezvous without a rank", []string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}, []string{"set RANK and WORLD_SIZE"}},
		{"an address without a port", []string{"MASTER_ADDR=127.0.0.1", "RANK=0", "WORLD_SIZE=2"}, []string{`MASTER_PORT=""`, "needs both"}},
		{"a rank without a size", []string{"RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}, []string{`WORLD_SIZE=""`, "need both"}},
		{"a rank out of range", []string{"RANK=4", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}, []string{`RANK="4", WORLD_SIZE="4"`, "0 ≤ rank < size"}},
		{"a rank that is not a number", []string{"RANK=one", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}, []string{`RANK="one"`}},
		{"off loopback without a token", []string{"RANK=1", "WORLD_SIZE=4", "MASTER_ADDR=192.0.2.7", "MASTER_PORT=29500"},
			[]string{"rank 1 of 4 (RANK, WORLD_SIZE)", "192.0.2.7:29500 is not a loopback address", coll.TokenEnv}},
		{"a short token", []string{"RANK=1", "WORLD_SIZE=4", "MASTER_ADDR=192.0.2.7", "MASTER_PORT=29500", coll.TokenEnv + "=short"},
			[]string{"too short"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			env(t, tc.env...)
			restore := coll.SetPMIx(nil)
			defer restore()
			job, err := coll.FromEnv(coll.JobOptions{})
			if err == nil {
				job.Close()
				t.Fatalf("FromEnv succeeded: %s", job.Launcher)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("the error is not one line: %q", msg)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("%q does not say %q", msg, s)
				}
			}
		})
	}
}

// TestFromEnvRendezvous: with RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT (loopback, so no token) every rank gets its rank, the
// size and an exchange among them; RANK wins over a launcher's own
// variables, and the token comes from VERBSEXP_JOB_TOKEN off loopback.
func TestFromEnvRendezvous(t *testing.T) {
	const size = 3
	port := freePort(t)
	jobs := make([]*coll.Job, size)
	for r := range size {
		env(t, fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", size), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
			"OMPI_COMM_WORLD_RANK=7", "OMPI_COMM_WORLD_SIZE=9")
		job, err := coll.FromEnv(coll.JobOptions{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if job.Rank() != r || job.Size() != size || job.Launcher != "TCP rendezvous at 127.0.0.1:"+port+" (RANK, WORLD_SIZE)" {
			t.Errorf("rank %d: rank %d of %d from %q", r, job.Rank(), job.Size(), job.Launcher)
		}
		jobs[r] = job
	}
	var wg sync.WaitGroup
	errs := make([]error, size)
	for r, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			all, err := job.Exchange([]byte{byte(r), 'x'})
			if err == nil {
				for q, b := range all {
					if !bytes.Equal(b, []byte{byte(q), 'x'}) {
						err = fmt.Errorf("rank %d's bytes are %q", q, b)
					}
				}
			}
			errs[r] = errors.Join(err, job.Close())
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}

	env(t, "SLURM_PROCID=2", "SLURM_NTASKS=4", "MASTER_ADDR=192.0.2.7", "MASTER_PORT=29500", coll.TokenEnv+"=0123456789abcdef0123")
	job, err := coll.FromEnv(coll.JobOptions{})
	if err != nil {
		t.Fatalf("Slurm's rank with a token: %v", err)
	}
	if job.Rank() != 2 || job.Size() != 4 || !strings.Contains(job.Launcher, "(SLURM_PROCID, SLURM_NTASKS)") {
		t.Errorf("rank %d of %d from %q", job.Rank(), job.Size(), job.Launcher)
	}
	job.Close()
}

// TestFromEnvJobIdentity: the rendezvous's job identity comes from
// JobOptions.Job, else the first launcher variable that gives one (in
// the documented order, torchrun's "none" being none), else the token;
// Launcher names it. Two jobs given one address then refuse each other's
// ranks (package rendezvous's tests).
func TestFromEnvJobIdentity(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		opts coll.JobOptions
		want string // after "TCP rendezvous at 127.0.0.1:PORT (RANK, WORLD_SIZE)"
	}{
		{nil, coll.JobOptions{}, ""},
		{[]string{"TORCHELASTIC_RUN_ID=none"}, coll.JobOptions{}, ""},
		{[]string{"TORCHELASTIC_RUN_ID=6bd1"}, coll.JobOptions{}, ", job TORCHELASTIC_RUN_ID=6bd1"},
		{[]string{"SLURM_JOB_ID=77", "SLURM_STEP_ID=3"}, coll.JobOptions{}, ", job SLURM_JOB_ID=77 SLURM_STEP_ID=3"},
		{[]string{"SLURM_JOB_ID=77", "SLURM_STEPID=4"}, coll.JobOptions{}, ", job SLURM_JOB_ID=77 SLURM_STEP_ID=4"},
		{[]string{"SLURM_JOB_ID=77"}, coll.JobOptions{}, ", job SLURM_JOB_ID=77"},
		{[]string{"PMIX_NAMESPACE=prterun-h-81@1", "OMPI_MCA_ess_base_jobid=5"}, coll.JobOptions{}, ", job PMIX_NAMESPACE=prterun-h-81@1"},
		{[]string{"OMPI_MCA_ess_base_jobid=5", "SLURM_JOB_ID=77"}, coll.JobOptions{}, ", job OMPI_MCA_ess_base_jobid=5"},
		{[]string{"TORCHELASTIC_RUN_ID=6bd1", "SLURM_JOB_ID=77"}, coll.JobOptions{}, ", job TORCHELASTIC_RUN_ID=6bd1"},
		{[]string{coll.JobIDEnv + "=nightly-3", "TORCHELASTIC_RUN_ID=6bd1"}, coll.JobOptions{}, ", job VERBSEXP_JOB_ID=nightly-3"},
		{[]string{coll.JobIDEnv + "=nightly-3"}, coll.JobOptions{Job: "given"}, ", job given"},
		// A digest of the token, the same from every build (ranks of one
		// job must agree): SHA-256 of a fixed prefix and the token, 8 bytes.
		{[]string{coll.TokenEnv + "=0123456789abcdef0123"}, coll.JobOptions{}, ", job token 629da13af2a17fd8"},
	} {
		port := freePort(t)
		env(t, append([]string{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}, tc.env...)...)
		job, err := coll.FromEnv(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if want := "TCP rendezvous at 127.0.0.1:" + port + " (RANK, WORLD_SIZE)" + tc.want; job.Launcher != want {
			t.Errorf("%q, %+v: %q, want %q", tc.env, tc.opts, job.Launcher, want)
		}
		job.Close()
	}
	env(t, "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", coll.JobIDEnv+"="+strings.Repeat("x", 300))
	if _, err := coll.FromEnv(coll.JobOptions{}); err == nil || !strings.Contains(err.Error(), "more than 200") {
		t.Errorf("a job identity of 300 bytes: %v", err)
	}
}

// fakePMIx stands in for package pmix.
type fakePMIx struct{ timeout time.Duration }

func (f *fakePMIx) Rank() int                               { return 1 }
func (f *fakePMIx) Size() int                               { return 2 }
func (f *fakePMIx) Exchange(local []byte) ([][]byte, error) { return nil, errors.New("not here") }
func (f *fakePMIx) Close() error                            { return nil }

// TestFromEnvPMIx: under PMIx FromEnv joins through what package pmix
// registered, with the timeout; MASTER_ADDR and MASTER_PORT, when set,
// choose the rendezvous instead.
func TestFromEnvPMIx(t *testing.T) {
	var got *fakePMIx
	restore := coll.SetPMIx(func(timeout time.Duration) (coll.Member, error) {
		got = &fakePMIx{timeout: timeout}
		return got, nil
	})
	defer restore()
	env(t, "PMIX_NAMESPACE=42", "PMIX_RANK=1", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2")
	job, err := coll.FromEnv(coll.JobOptions{Timeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if job.Launcher != "PMIx" || job.Member != got || got.timeout != 7*time.Second {
		t.Errorf("got %q, %v", job.Launcher, got)
	}
	job.Close()
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	t.Setenv("MASTER_PORT", freePort(t))
	got = nil
	if job, err = coll.FromEnv(coll.JobOptions{}); err != nil {
		t.Fatal(err)
	}
	if got != nil || !strings.HasPrefix(job.Launcher, "TCP rendezvous") {
		t.Errorf("with MASTER_ADDR set under PMIx: %q", job.Launcher)
	}
	job.Close()
	coll.SetPMIx(func(time.Duration) (coll.Member, error) { return nil, errors.New("PMIx_Init: UNREACHABLE") })
	env(t, "PMIX_NAMESPACE=42")
	if _, err := coll.FromEnv(coll.JobOptions{}); err == nil || err.Error() != "coll: FromEnv: PMIx_Init: UNREACHABLE" {
		t.Errorf("a failing PMIx: %v", err)
	}
}
