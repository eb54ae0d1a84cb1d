package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// groupCommits are a gateway row's group commits over its rounds (its
// store's ledger.CommitStats, background work included), beside the
// rounds' wall time and requests.
type groupCommits struct {
	ledger.CommitStats
	wall     time.Duration
	requests int
}

// committing runs measure, adding the group commits the target's store
// made meanwhile to key's row, when the target is a gateway.
func (e *benchEnv) committing(key row, measure func() (round, error)) (round, error) {
	st := e.gwStores[key.target]
	if st == nil {
		return measure()
	}
	before := st.CommitStats()
	rd, err := measure()
	after := st.CommitStats()
	g := e.groupCommits[key]
	if g == nil {
		g = &groupCommits{}
		e.groupCommits[key] = g
	}
	g.Commits += after.Commits - before.Commits
	g.Steps += after.Steps - before.Steps
	g.Time += after.Time - before.Time
	g.wall += rd.elapsed
	g.requests += len(rd.lat)
	return rd, err
}

// printGroupCommits prints each gateway row of writes' group commits: the steps
// that shared a commit, commits per request, what a commit took, and the
// share of the row's wall time the commits took (on SQLite, whose one
// writer commits one batch at a time, the writer's busy share: near 1, the
// writer and the disk are the limit).
func printGroupCommits(w io.Writer, e *benchEnv, concurrencies []int) error {
	fmt.Fprintln(w, "\ngroup commits of each gateway row (its store's, background work included):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\twrites\tconcurrency\tsteps/commit\tcommits/request\tms/commit\tcommits' share\t")
	for _, t := range e.targets {
		for _, mode := range t.modes() {
			if mode == "replay" {
				continue // a replay writes nothing; its round's commits are the untimed writes it replays
			}
			for _, c := range concurrencies {
				g := e.groupCommits[row{t.name, mode, c}]
				if g == nil || g.Commits == 0 || g.requests == 0 {
					continue
				}
				n := float64(g.Commits)
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.3f\t%.0f%%\t\n", t.name, mode, c, float64(g.Steps)/n,
					n/float64(g.requests), ms(g.Time)/n, 100*g.Time.Seconds()/g.wall.Seconds())
			}
		}
	}
	return tw.Flush()
}
