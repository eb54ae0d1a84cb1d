package scenarios

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/control/client"
)

// AuditTrail: the customer disputes PaymentUnknown's capture. The operator
// exports the tenant's audit log, verifies it offline with the gateway's
// public key alone, and traces the operation: one request forwarded, a
// retry refused while the outcome was unknown, the operator's resolution,
// a replay — one charge.
func AuditTrail(ctx context.Context, e *Env, s *State) error {
	if s.CaptureOp == "" {
		return errors.New("no capture to trace: PaymentUnknown did not run")
	}
	size, err := e.sealed(ctx)
	if err != nil {
		return err
	}
	export := filepath.Join(e.Dir, "audit-"+s.Run+".jsonl")
	if _, err := e.CLI(ctx, "audit", "export", "--tenant", e.Tenant, "--out", export, "--store", e.StoreDSN); err != nil {
		return err
	}
	v, err := audit.LoadVerifier(e.AuditKey)
	if err != nil {
		return err
	}
	rep, err := audit.Verify(export, v, e.Checkpoints)
	if err == nil {
		err = rep.Covered() // as the command checks: every event under a signed checkpoint
	}
	if err != nil {
		return fmt.Errorf("the export does not verify: %w", err)
	}
	e.Say("$ idemgate audit export --tenant %s --out %s", e.Tenant, filepath.Base(export))
	e.Say("$ idemgate audit verify %s --key %s --checkpoint %s", filepath.Base(export), filepath.Base(e.AuditKey),
		filepath.Base(e.Checkpoints))
	e.Say("-> ok: %d events, every one under a checkpoint signed by the gateway (size %d), checked offline",
		rep.Events, size)
	trace, err := e.CLI(ctx, "audit", "trace", s.CaptureOp, "--store", e.StoreDSN)
	if err != nil {
		return err
	}
	e.Say("$ idemgate audit trace %s", s.CaptureOp)
	for _, line := range strings.Split(strings.TrimRight(trace, "\n"), "\n") {
		e.Say("  %s", line)
	}
	return nil
}

// sealed waits until the log is sealed and signed up to now: the latest
// checkpoint stops growing for longer than the batcher, the sealer and the
// checkpoint interval take.
func (e *Env) sealed(ctx context.Context) (int64, error) {
	last := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		size, err := e.checkpointSize(ctx)
		if err != nil {
			return 0, err
		}
		if size == last && size > 0 {
			return size, nil
		}
		last = size
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(400 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("the audit log is still growing after 10s")
}

// checkpointSize reads the latest checkpoint's size, through the control
// API's typed client; 0 when there is none yet.
func (e *Env) checkpointSize(ctx context.Context) (int64, error) {
	c, err := e.control(e.OperatorToken)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := c.Checkpoint(ctx)
	if client.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cp, err := audit.ParseCheckpoint(string(text))
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	return cp.Size, nil
}
