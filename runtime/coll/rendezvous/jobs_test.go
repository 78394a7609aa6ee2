package rendezvous_test

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll/rendezvous"
)

// Two jobs given one address, in one process (process_test.go starts
// them as processes, together).

// tagged is what rank of job contributes to round: whose it is.
func tagged(job string, rank, round int) []byte {
	return fmt.Appendf(nil, "%s/%d/%d", job, rank, round)
}

// ownRounds runs rounds on rs (the ranks of job, by rank) and checks that
// every entry of every round is job's.
func ownRounds(rs []*rendezvous.Rendezvous, job string, from, to int) []error {
	return each(len(rs), func(rank int) error {
		for round := from; round <= to; round++ {
			all, err := rs[rank].Exchange(tagged(job, rank, round))
			if err != nil {
				return err
			}
			for r, b := range all {
				if want := tagged(job, r, round); string(b) != string(want) {
					return fmt.Errorf("round %d: rank %d's entry is %q, not %q", round, r, b, want)
				}
			}
		}
		return nil
	})
}

// TestTwoJobsOneAddress: jobs "A" and "B" of 3 ranks each given one
// address, B's ranks coming first. B's rank 0 cannot listen and says
// whose rendezvous does; B's other ranks are refused by A's rank 0 and
// fail, naming both jobs; A runs its rounds with its own ranks only,
// every entry checked, unharmed. So with a token: another token is
// another job (its identity is derived from it), refused the same way.
func TestTwoJobsOneAddress(t *testing.T) {
	for _, tc := range []struct {
		name       string
		a, b       rendezvous.Options
		aJob, bJob string // as messages name them
		refused    string // what B's ranks 1 and 2 say after "rank N of ", a regexp
	}{
		{"identities", rendezvous.Options{Job: "A"}, rendezvous.Options{Job: "B"}, `job "A"`, `job "B"`,
			regexp.QuoteMeta(`job "B": two jobs were given one address (MASTER_ADDR:MASTER_PORT): give each its own port`)},
		{"tokens", rendezvous.Options{Token: token}, rendezvous.Options{Token: []byte("the token of job B, long enough")}, `job "token `, `job "token `,
			`job "token [0-9a-f]{16}": another job's rendezvous \(two jobs given one address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.a.Timeout, tc.b.Timeout = 10*time.Second, 2*time.Second
			rootA, err := rendezvous.Join("127.0.0.1:0", 0, 3, tc.a)
			if err != nil {
				t.Fatal(err)
			}
			addr := rootA.Addr()
			if _, err := rendezvous.Join(addr, 0, 3, tc.b); err == nil ||
				!regexp.MustCompile(`rank 0 of `+regexp.QuoteMeta(tc.bJob)+`.* cannot listen at `+regexp.QuoteMeta(addr)+`: the rendezvous of `+
					regexp.QuoteMeta(tc.aJob)+`.*\(rank 0 is pid `+fmt.Sprint(os.Getpid())+`\) listens there`).MatchString(err.Error()) {
				t.Errorf("job B's rank 0: %v", err)
			}
			bs := make([]*rendezvous.Rendezvous, 3)
			for r := 1; r < 3; r++ {
				if bs[r], err = rendezvous.Join(addr, r, 3, tc.b); err != nil {
					t.Fatal(err)
				}
			}
			for r, err := range each(3, func(r int) error {
				if r == 0 {
					return nil
				}
				_, err := bs[r].Exchange(tagged("B", r, 1))
				return err
			})[1:] {
				says := regexp.MustCompile(`the rendezvous at ` + regexp.QuoteMeta(addr) + ` is ` + regexp.QuoteMeta(tc.aJob) + `.*'s \(its rank 0 is pid \d+\).* rank ` +
					fmt.Sprint(r+1) + ` of ` + tc.refused)
				if err == nil || !says.MatchString(err.Error()) {
					t.Errorf("job B's rank %d: %v, want it to say %q", r+1, err, says)
				}
			}
			closeAll(t, bs)
			as := []*rendezvous.Rendezvous{rootA}
			for r := 1; r < 3; r++ {
				a, err := rendezvous.Join(addr, r, 3, tc.a)
				if err != nil {
					t.Fatal(err)
				}
				as = append(as, a)
			}
			for r, err := range ownRounds(as, "A", 1, 3) {
				if err != nil {
					t.Errorf("job A's rank %d: %v", r, err)
				}
			}
			closeAll(t, as)
		})
	}
}

// TestJobsWithoutIdentity: what is detected when two jobs have no
// identity (no token, no launcher id) and meet at one address, with job
// A's ranks all joined and a round done: a second rank 0 cannot listen,
// says whose rendezvous does and makes it fail its job; a second rank 1
// (a late claimant: the root listens until Close) fails the job too.
// Either way every rank of A fails its next round, naming both
// processes (address, pid and parent pid) and saying what to do.
func TestJobsWithoutIdentity(t *testing.T) {
	hint := "two jobs at one address? give each its own MASTER_PORT, and each job an identity, VERBSEXP_JOB_ID"
	pid := fmt.Sprintf("pid %d, parent %d", os.Getpid(), os.Getppid())
	for _, tc := range []struct {
		name    string
		other   int    // the rank the other job's process says it is
		says    string // what A's ranks say then
		itSays  string // what the other job's process says
		onJoin  bool   // it says so at Join (else at Exchange)
		itsPeer string
	}{
		{"second rank 0", 0, "says it is rank 0, which is the root's (pid " + fmt.Sprint(os.Getpid()) + ") (" + hint,
			"rank 0 of a job without an identity cannot listen at ADDR: the rendezvous of another job without an identity (rank 0 is pid " +
				fmt.Sprint(os.Getpid()) + ") listens there, and now fails its job", true, ""},
		{"second rank 1", 1, "two processes say they are rank 1: at 127.0.0.1:", "the root (rank 0) refused this rank: two processes say they are rank 1", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := job(t, 3, rendezvous.Options{Timeout: 10 * time.Second})
			addr := as[0].Addr()
			for r, err := range ownRounds(as, "A", 1, 1) {
				if err != nil {
					t.Fatalf("job A's rank %d: %v", r, err)
				}
			}
			other, err := rendezvous.Join(addr, tc.other, 3, rendezvous.Options{Timeout: 10 * time.Second})
			if tc.onJoin {
				if want := strings.ReplaceAll(tc.itSays, "ADDR", addr); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("the other job's rank %d: %v, want it to say %q", tc.other, err, want)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := other.Exchange(tagged("B", tc.other, 1)); err == nil || !strings.Contains(err.Error(), tc.itSays) {
					t.Errorf("the other job's rank %d: %v, want it to say %q", tc.other, err, tc.itSays)
				}
				other.Close()
			}
			for r, err := range ownRounds(as, "A", 2, 2) {
				if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), pid) || !strings.Contains(err.Error(), hint) {
					t.Errorf("job A's rank %d: %v, want it to say %q, naming %s", r, err, tc.says, pid)
				}
			}
			closeAll(t, as)
		})
	}
}

// TestJobIdentityRefused: an identity longer than MaxJob is refused at
// Join; Job reports the identity, given or derived from the token (a
// digest of it, never the token).
func TestJobIdentityRefused(t *testing.T) {
	if _, err := rendezvous.Join("127.0.0.1:1", 1, 2, rendezvous.Options{Job: strings.Repeat("j", rendezvous.MaxJob+1)}); err == nil ||
		!strings.Contains(err.Error(), "a job identity of 201 bytes: at most 200") {
		t.Errorf("a long identity: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		opts rendezvous.Options
		want *regexp.Regexp
	}{
		{rendezvous.Options{Job: "SLURM_JOB_ID=7 SLURM_STEP_ID=1"}, regexp.MustCompile(`^SLURM_JOB_ID=7 SLURM_STEP_ID=1$`)},
		{rendezvous.Options{Token: token}, regexp.MustCompile(`^token [0-9a-f]{16}$`)},
		{rendezvous.Options{Token: token, Job: "given"}, regexp.MustCompile(`^given$`)},
		{rendezvous.Options{}, regexp.MustCompile(`^$`)},
	} {
		r, err := rendezvous.Join(addr, 1, 2, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if !tc.want.MatchString(r.Job()) || strings.Contains(r.Job(), string(token)) {
			t.Errorf("Job() = %q, want %s", r.Job(), tc.want)
		}
		r.Close()
	}
}
