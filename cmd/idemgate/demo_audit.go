package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgate/idemgate/audit"
)

// demoAuditTrail: the customer disputes the capture of act 6. The operator
// exports the tenant's audit log, verifies it offline with the gateway's
// public key alone, and traces the operation: one request forwarded, a
// retry refused while the outcome was unknown, the operator's resolution,
// a replay — one charge.
func demoAuditTrail(ctx context.Context, e *demoEnv, s *demoState) error {
	if s.captureOp == "" {
		return fmt.Errorf("no capture to trace: act 6 did not run")
	}
	size, err := e.sealed(ctx)
	if err != nil {
		return err
	}
	export := filepath.Join(e.dir, "audit-demo.jsonl")
	if _, err := e.cli(ctx, "audit", "export", "--tenant", "demo", "--out", export, "--store", e.storeDSN); err != nil {
		return err
	}
	v, err := audit.LoadVerifier(filepath.Join(e.dir, demoKey+".pub"))
	if err != nil {
		return err
	}
	rep, err := audit.Verify(export, v, filepath.Join(e.dir, demoCheckpoints))
	if err != nil {
		return fmt.Errorf("the export does not verify: %w", err)
	}
	e.say("$ idemgate audit export --tenant demo --out audit-demo.jsonl")
	e.say("$ idemgate audit verify audit-demo.jsonl --key audit.key.pub --checkpoint %s", demoCheckpoints)
	e.say("-> ok: %d events, every one under a checkpoint signed by the gateway (size %d), checked offline",
		rep.Events, size)
	trace, err := e.cli(ctx, "audit", "trace", s.captureOp, "--store", e.storeDSN)
	if err != nil {
		return err
	}
	e.say("$ idemgate audit trace %s", s.captureOp)
	for _, line := range strings.Split(strings.TrimRight(trace, "\n"), "\n") {
		e.say("  %s", line)
	}
	return nil
}

// cli runs an idemgate command in this process and returns its output.
func (e *demoEnv) cli(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(io.Discard)
	if err := root.ExecuteContext(ctx); err != nil {
		return "", fmt.Errorf("idemgate %s: %w", strings.Join(args, " "), err)
	}
	return out.String(), nil
}

// sealed waits until the log is sealed and signed up to now: the latest
// checkpoint (GET /_idem/v1/audit/checkpoint) stops growing for longer
// than the batcher, the sealer and the checkpoint interval take.
func (e *demoEnv) sealed(ctx context.Context) (int64, error) {
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

func (e *demoEnv) checkpointSize(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", e.gwURL+"/_idem/v1/audit/checkpoint", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+demoOperatorToken)
	resp, err := demoClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode == http.StatusNotFound {
		return 0, err // none yet
	}
	c, err := audit.ParseCheckpoint(string(b))
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	return c.Size, nil
}
