package maintain

import (
	"context"
	"slices"
	"testing"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/reconcile"
)

type noStore struct{}

func (noStore) ExpireLeases(context.Context, int) (int, error)    { return 0, nil }
func (noStore) ExpireApprovals(context.Context, int) (int, error) { return 0, nil }
func (noStore) Purge(context.Context, int) (int, error)           { return 0, nil }

func names(o Options) []string {
	var out []string
	for _, j := range o.jobs(noStore{}) {
		out = append(out, j.name)
	}
	return out
}

// TestJobs: the sweeps and the purge always run; the sealer when given;
// the reconciler when given probes, and not otherwise.
func TestJobs(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want []string
	}{
		{Options{}, []string{jobLeases, jobApprovals, jobPurge}},
		{Options{SweepInterval: -1, PurgeInterval: -1}, nil},
		{Options{PurgeInterval: -1, Sealer: &audit.Sealer{}}, []string{jobLeases, jobApprovals, jobSeal}},
		{Options{Reconciler: &reconcile.Reconciler{}}, []string{jobLeases, jobApprovals, jobPurge}},
		{Options{Reconciler: &reconcile.Reconciler{Probes: map[string]*reconcile.Probe{"POST /v1/x": {}}},
			Sealer: &audit.Sealer{}}, []string{jobLeases, jobApprovals, jobReconcile, jobPurge, jobSeal}},
	} {
		if got := names(c.o); !slices.Equal(got, c.want) {
			t.Errorf("jobs %q, want %q", got, c.want)
		}
	}
}
