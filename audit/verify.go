package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// maxLine bounds an export line: an event is a few hundred bytes, a
// checkpoint line under a kilobyte.
const maxLine = 1 << 16

// Tampered is the first thing wrong with an export: where, and why.
type Tampered struct {
	Line int   // 1-based line of the export, 0 when not one line's fault
	Seq  int64 // the event's position, -1 when none
	Why  string
}

func (t *Tampered) Error() string {
	switch {
	case t.Line > 0 && t.Seq >= 0:
		return fmt.Sprintf("line %d, event %d: %s", t.Line, t.Seq, t.Why)
	case t.Line > 0:
		return fmt.Sprintf("line %d: %s", t.Line, t.Why)
	}
	return t.Why
}

// Report is what a verified export holds.
type Report struct {
	Origin      string
	Events      int64
	Checkpoints int        // distinct sizes vouched for by a signature
	Largest     Checkpoint // the largest one
	Unsigned    int64      // events after it, not yet covered by a checkpoint
	// UnsignedLine is the export's line of the first of those, 0 when
	// there is none.
	UnsignedLine int
}

// Covered returns nil when signed checkpoints vouch for every event of
// the export, and otherwise a *Tampered naming the events after the
// largest: nothing proves them, so an event forged and appended after the
// last checkpoint looks exactly like one not sealed yet. A verifier that
// accepts such a tail (of a live log's export) does so knowingly.
func (r Report) Covered() error {
	if r.Unsigned == 0 {
		return nil
	}
	first, last := r.Largest.Size, r.Events-1
	which := fmt.Sprintf("events %d to %d follow", first, last)
	if first == last {
		which = fmt.Sprintf("event %d follows", first)
	}
	return &Tampered{Line: r.UnsignedLine, Seq: first, Why: fmt.Sprintf("%s the last signed checkpoint (size %d): no "+
		"signature vouches for them, so they may be forged, or not sealed yet", which, r.Largest.Size)}
}

// checkpointLine is an export's (and a checkpoints file's) line for one
// signed checkpoint.
type checkpointLine struct {
	Checkpoint *string `json:"checkpoint"`
}

// Verify checks an export offline with the verifier key v, and with
// earlier checkpoints (the lines of a checkpoints file, or of an earlier
// export) that must still hold: every event in canonical form at its
// position, every checkpoint signed by v and matching the tree of the
// events before it, no two checkpoints of one size with different roots,
// and no checkpoint beyond the export's end. It reads the file twice and
// keeps O(log n) hashes, whatever its size.
func Verify(path string, v note.Verifier, earlier ...string) (Report, error) {
	cps, err := checkpoints(path, v, nil, "")
	if err != nil {
		return Report{}, err
	}
	only := "" // a checkpoints file holds every tenant's: keep the export's log's
	if len(cps) > 0 {
		only = cps[0].Origin
	}
	for _, e := range earlier {
		if cps, err = checkpoints(e, v, cps, only); err != nil {
			return Report{}, err
		}
	}
	if len(cps) == 0 {
		return Report{}, &Tampered{Seq: -1, Why: "no checkpoint: no signature vouches for these events"}
	}
	return replay(path, cps)
}

// signed is a checkpoint, where it was read.
type signed struct {
	Checkpoint
	where string
}

// checkpoints adds the checkpoints of the file at path to cps (those of
// origin only, if set), sorted by size, refusing a bad signature, a second
// origin and a fork.
func checkpoints(path string, v note.Verifier, cps []signed, only string) ([]signed, error) {
	err := eachLine(path, func(n int, line []byte) error {
		if !bytes.HasPrefix(line, []byte(`{"checkpoint"`)) {
			return nil
		}
		var cl checkpointLine
		if err := json.Unmarshal(line, &cl); err != nil || cl.Checkpoint == nil {
			return &Tampered{Line: n, Seq: -1, Why: "a checkpoint line that does not parse"}
		}
		if only != "" && !strings.HasPrefix(*cl.Checkpoint, only+"\n") {
			return nil
		}
		c, err := OpenCheckpoint([]byte(*cl.Checkpoint), v)
		if err != nil {
			return &Tampered{Line: n, Seq: -1, Why: "checkpoint not signed by this key: " + err.Error()}
		}
		cps = append(cps, signed{c, fmt.Sprintf("%s:%d", path, n)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(cps, func(i, j int) bool { return cps[i].Size < cps[j].Size })
	for i := 1; i < len(cps); i++ {
		a, b := cps[i-1], cps[i]
		switch {
		case a.Origin != b.Origin:
			return nil, &Tampered{Seq: -1, Why: fmt.Sprintf("checkpoints of two logs: %q (%s) and %q (%s)",
				a.Origin, a.where, b.Origin, b.where)}
		case a.Size == b.Size && a.Root != b.Root:
			return nil, &Tampered{Seq: -1, Why: fmt.Sprintf("two checkpoints of size %d with different roots (%s, "+
				"%s): the log forked", a.Size, a.where, b.where)}
		}
	}
	return cps, nil
}

// replay streams the events, checking each and the tree at every
// checkpoint's size. Lines are parsed and hashed by a worker per CPU, in
// chunks, and folded into the tree in order by this goroutine.
func replay(path string, cps []signed) (Report, error) {
	var f Frontier
	rep := Report{Origin: cps[0].Origin}
	largest := cps[len(cps)-1].Size
	next, good, tenant := 0, int64(0), ""
	for ; next < len(cps) && cps[next].Size == 0; next++ {
		if cps[next].Root != f.Root() {
			return rep, &Tampered{Seq: -1, Why: "a checkpoint of the empty log with another root (" + cps[next].where + ")"}
		}
		rep.Checkpoints++
	}
	err := hashLines(path, func(l hashed) error {
		if err := l.check(f.Size(), &tenant); err != nil {
			return err
		}
		if f.Size() == largest {
			rep.UnsignedLine = l.n
		}
		f.Append(l.hash)
		for ; next < len(cps) && cps[next].Size == f.Size(); next++ {
			if cps[next].Root != f.Root() {
				return &Tampered{Line: l.n, Seq: -1, Why: fmt.Sprintf("the first %d events do not hash to the root "+
					"signed for that size (%s): an event from %d to %d was changed, removed or added",
					f.Size(), cps[next].where, good, f.Size()-1)}
			}
			good = f.Size()
			rep.Checkpoints++
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.Events = f.Size()
	if next < len(cps) { // sorted: every one left is beyond the end
		c := cps[len(cps)-1]
		return rep, &Tampered{Seq: -1, Why: fmt.Sprintf("the export ends at %d events, but a checkpoint (%s) "+
			"vouches for %d: it was truncated", f.Size(), c.where, c.Size)}
	}
	rep.Largest = cps[len(cps)-1].Checkpoint
	rep.Unsigned = rep.Events - rep.Largest.Size
	return rep, nil
}

// hashed is one event line, parsed and hashed, or why it could not be.
type hashed struct {
	n      int
	seq    int64
	tenant string
	hash   tlog.Hash
	err    error // the line is not an event in canonical form
}

// check places the line at position at of tenant's log.
func (l hashed) check(at int64, tenant *string) error {
	switch {
	case l.err != nil:
		return l.err
	case l.seq > at:
		return &Tampered{Line: l.n, Seq: l.seq, Why: fmt.Sprintf("event %d belongs here: events %d to %d are "+
			"missing (deleted) or out of order (swapped)", at, at, l.seq-1)}
	case l.seq < at:
		return &Tampered{Line: l.n, Seq: l.seq, Why: fmt.Sprintf("out of order: event %d was expected here "+
			"(events swapped or repeated)", at)}
	case *tenant != "" && l.tenant != *tenant:
		return &Tampered{Line: l.n, Seq: l.seq, Why: fmt.Sprintf("tenant %q in %q's log", l.tenant, *tenant)}
	}
	*tenant = l.tenant
	return nil
}

// hashEvent reads one event line: in canonical form, so that its bytes
// are its leaf.
func hashEvent(n int, line []byte) hashed {
	e, err := ParseEvent(line)
	if err != nil {
		return hashed{n: n, err: &Tampered{Line: n, Seq: -1, Why: err.Error()}}
	}
	leaf, err := e.Leaf()
	if err != nil || !bytes.Equal(leaf, line) {
		return hashed{n: n, err: &Tampered{Line: n, Seq: e.Seq, Why: "not the canonical form of its own fields: " +
			"the line was edited"}}
	}
	return hashed{n: n, seq: e.Seq, tenant: e.Tenant, hash: tlog.RecordHash(leaf)}
}

// chunk is a run of consecutive lines, hashed by one worker.
type chunk struct {
	lines [][]byte
	first []int
	out   []hashed
	done  chan struct{}
}

// chunkSize is how many lines a worker takes at once.
const chunkSize = 512

// hashLines calls fn with each event line of the file, in order, hashed
// by a worker per CPU; it stops at fn's first error.
func hashLines(path string, fn func(hashed) error) error {
	workers := runtime.NumCPU()
	work, order := make(chan *chunk, 2*workers), make(chan *chunk, 2*workers)
	for range workers {
		go func() {
			for c := range work {
				c.out = make([]hashed, len(c.lines))
				for i, l := range c.lines {
					c.out[i] = hashEvent(c.first[i], l)
				}
				close(c.done)
			}
		}()
	}
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() { readErr <- readChunks(path, work, order, stop) }()
	for c := range order {
		<-c.done
		for _, l := range c.out {
			if err := fn(l); err != nil {
				close(stop)
				for c := range order { // let the reader and the workers end
					<-c.done
				}
				<-readErr
				return err
			}
		}
	}
	return <-readErr
}

// readChunks cuts the file's event lines into chunks, handing each to the
// workers and, in order, to the folder, until stop.
func readChunks(path string, work, order chan<- *chunk, stop <-chan struct{}) error {
	defer close(work)
	defer close(order)
	c := &chunk{done: make(chan struct{})}
	send := func() bool {
		select {
		case order <- c:
		case <-stop:
			return false
		}
		work <- c
		c = &chunk{done: make(chan struct{})}
		return true
	}
	err := eachLine(path, func(n int, line []byte) error {
		if bytes.HasPrefix(line, []byte(`{"checkpoint"`)) || len(bytes.TrimSpace(line)) == 0 {
			return nil
		}
		c.lines, c.first = append(c.lines, bytes.Clone(line)), append(c.first, n)
		if len(c.lines) == chunkSize && !send() {
			return errStopped
		}
		return nil
	})
	if err == nil && len(c.lines) > 0 {
		send()
	}
	if errors.Is(err, errStopped) {
		return nil
	}
	return err
}

var errStopped = errors.New("stopped")

// eachLine calls fn with each line of the file at path.
func eachLine(path string, fn func(n int, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, maxLine)
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return &Tampered{Line: n, Seq: -1, Why: fmt.Sprintf("a line longer than %d bytes", maxLine)}
		}
		if len(line) > 0 {
			if ferr := fn(n, bytes.TrimRight(line, "\n")); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
}
