package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/ledger"
)

// Commits is what the commit counters read: a store handle's group
// commits. A ledger.Store is one.
type Commits interface {
	CommitStats() ledger.CommitStats
}

var _ Commits = ledger.Store(nil)

// commitCollector reads this instance's group commits at scrape time.
// Their rates say what the store's writes cost: steps per commit, seconds
// per commit, and on SQLite the writer's busy share (docs/capacity.md).
type commitCollector struct {
	store                Commits
	commits, steps, took *prometheus.Desc
}

func newCommitCollector(s Commits) *commitCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("idemgate_store_"+name, help, nil, nil)
	}
	return &commitCollector{store: s,
		commits: d("commits_total", "Transactions of steps this instance committed (group commits: each carries "+
			"the steps that arrived while the one before it ran)."),
		steps: d("committed_steps_total", "Steps those transactions carried: their rate over commits_total's is "+
			"the steps per commit."),
		took: d("commit_seconds_total", "Time those transactions took, from their start to their acknowledged "+
			"commit, summed. On SQLite, whose one writer runs one at a time, its rate is the writer's busy share: "+
			"near 1, the writer and the disk are the limit."),
	}
}

// Describe implements prometheus.Collector.
func (c *commitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.commits
	ch <- c.steps
	ch <- c.took
}

// Collect implements prometheus.Collector.
func (c *commitCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.CommitStats()
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(st.Commits))
	ch <- prometheus.MustNewConstMetric(c.steps, prometheus.CounterValue, float64(st.Steps))
	ch <- prometheus.MustNewConstMetric(c.took, prometheus.CounterValue, st.Time.Seconds())
}
