package ledger

import (
	"sync/atomic"
	"time"
)

// CommitStats count a store handle's group commits since it was opened:
// the transactions that carried steps and committed, the steps they
// carried, and their time from start to acknowledged commit, summed. From
// two readings, Steps/Commits is how many steps shared a commit, and
// Time/Commits what a commit took. On SQLite, whose one writer runs one
// batch at a time, Time over the wall time between the readings is the
// writer's busy share: near 1, the disk and the writer are the limit
// (docs/capacity.md).
type CommitStats struct {
	Commits uint64
	Steps   uint64
	Time    time.Duration
}

// CommitCounter is what a store keeps its CommitStats in: safe for
// concurrent use, read without stopping the writers.
type CommitCounter struct {
	commits, steps atomic.Uint64
	nanos          atomic.Int64
}

// Committed counts one committed transaction of steps steps that took d.
func (c *CommitCounter) Committed(steps int, d time.Duration) {
	c.commits.Add(1)
	c.steps.Add(uint64(steps))
	c.nanos.Add(int64(d))
}

// Stats reads the counts.
func (c *CommitCounter) Stats() CommitStats {
	return CommitStats{Commits: c.commits.Load(), Steps: c.steps.Load(), Time: time.Duration(c.nanos.Load())}
}
