package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"
)

// Log is what a sealer drives: a store's one-sealer transaction, and its
// stored checkpoints.
type Log interface {
	SealAudit(ctx context.Context, fn func(SealTx) error) (bool, error)
	AuditCheckpoints(ctx context.Context, tenant string, after int64) ([]Stored, error)
}

// Sealer seals a store's audit events into its tenants' logs, signs
// checkpoints as they fall due, and appends each to a checkpoints file
// outside the database: a copy the database's administrator cannot rewrite
// along with the log.
type Sealer struct {
	Log     Log
	Signing Signing
	Batch   int           // events per round; 0 is 512
	Idle    time.Duration // the pause once caught up; 0 is 100 ms
	File    string        // the checkpoints file; "" for none
	Logger  *slog.Logger
	Now     func() time.Time // the clock; nil is time.Now
}

func (s *Sealer) batch() int {
	if s.Batch <= 0 {
		return 512
	}
	return s.Batch
}

func (s *Sealer) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// Round seals one batch, in one transaction, and publishes the
// checkpoints it signed. It returns how many events it sealed (0 when
// another sealer holds the log).
func (s *Sealer) Round(ctx context.Context) (int, error) {
	var n int
	var signed []Stored
	ran, err := s.Log.SealAudit(ctx, func(tx SealTx) error {
		var err error
		n, signed, err = SealRound(ctx, tx, s.batch(), s.Signing, s.now())
		return err
	})
	if err != nil || !ran { // not ran: another sealer had the log, and this round is void
		return 0, err
	}
	return n, s.publish(signed)
}

// Run seals until ctx ends: at once while a backlog lasts, every Idle
// once caught up. A failed round is logged and tried again; sealing is
// never what a request waits for.
func (s *Sealer) Run(ctx context.Context) {
	if err := s.SyncFile(ctx); err != nil {
		s.log(ctx, "sync checkpoints file", err)
	}
	idle := s.Idle
	if idle <= 0 {
		idle = 100 * time.Millisecond
	}
	for {
		n, err := s.Round(ctx)
		if err != nil && ctx.Err() == nil {
			s.log(ctx, "seal audit log", err)
		}
		if n == s.batch() && err == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(idle):
		}
	}
}

func (s *Sealer) log(ctx context.Context, msg string, err error) {
	if s.Logger != nil {
		s.Logger.LogAttrs(ctx, slog.LevelError, msg, slog.String("error", err.Error()))
	}
}

// publish appends signed checkpoints to the file, durably.
func (s *Sealer) publish(cps []Stored) error {
	if s.File == "" || len(cps) == 0 {
		return nil
	}
	f, err := os.OpenFile(s.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoints file: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, c := range cps {
		line, err := CheckpointLine(c.Signed)
		if err != nil {
			f.Close()
			return err
		}
		_, _ = w.Write(append(line, '\n')) // its error is Flush's
	}
	if err := errors.Join(w.Flush(), f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("checkpoints file: %w", err)
	}
	return nil
}

// SyncFile appends to the checkpoints file the stored checkpoints it
// lacks: those signed while it could not be written, or by another
// gateway's sealer.
func (s *Sealer) SyncFile(ctx context.Context) error {
	if s.File == "" {
		return nil
	}
	have, err := fileSizes(s.File)
	if err != nil {
		return err
	}
	cps, err := s.Log.AuditCheckpoints(ctx, "", -1)
	if err != nil {
		return err
	}
	var missing []Stored
	for _, c := range cps {
		if size, ok := have[c.Origin]; !ok || c.Size > size {
			missing = append(missing, c)
		}
	}
	return s.publish(missing)
}

// fileSizes reads a checkpoints file's largest size per origin.
func fileSizes(path string) (map[string]int64, error) {
	have := map[string]int64{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return have, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoints file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, maxLine), maxLine)
	for sc.Scan() {
		var cl checkpointLine
		if json.Unmarshal(sc.Bytes(), &cl) != nil || cl.Checkpoint == nil {
			continue
		}
		c, err := ParseCheckpoint(noteText(*cl.Checkpoint))
		if err == nil && c.Size >= have[c.Origin] {
			have[c.Origin] = c.Size
		}
	}
	return have, sc.Err()
}

// noteText is a signed note's text, before its signatures.
func noteText(signed string) string {
	for i := 0; i+1 < len(signed); i++ {
		if signed[i] == '\n' && signed[i+1] == '\n' {
			return signed[:i+1]
		}
	}
	return signed
}
