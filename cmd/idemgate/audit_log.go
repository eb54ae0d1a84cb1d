package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

func newAuditExportCmd() *cobra.Command {
	var dsn, tenant, out string
	cmd := &cobra.Command{
		Use:   "export --tenant T [--out FILE] --store DSN",
		Short: "Write a tenant's audit log as JSON Lines: its sealed events, then its signed checkpoints",
		Long: `export writes one tenant's audit log (docs/design.md, "Audit log"): its sealed events in log
order, one per line, each line the canonical JSON that is its leaf, then one
{"checkpoint": …} line per signed checkpoint. Events not yet sealed are not in it. With
--out the export is written to a temporary file next to FILE (mode 0600) and renamed
over FILE once complete, so a failed export leaves FILE as it was; without, it goes to
stdout. How many events and checkpoints were written goes to stderr. Check the export
offline with 'idemgate audit verify'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return errors.New("--tenant is required: each tenant has its own log")
			}
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			var lines lineCounter
			var events int64
			write := func(w io.Writer) (err error) {
				lines.w = w
				events, err = ledger.ExportAudit(cmd.Context(), s, tenant, &lines)
				return err
			}
			if out == "" {
				err = write(cmd.OutOrStdout())
			} else {
				err = writeAtomic(out, write)
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.ErrOrStderr(), "exported %d events and %d checkpoints of tenant %q\n",
				events, lines.n-events, tenant)
			return err
		},
	}
	storeFlag(cmd, &dsn)
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose log to export (required)")
	cmd.Flags().StringVar(&out, "out", "", "write to this file, atomically, instead of stdout")
	return cmd
}

// lineCounter counts the lines written through it: an export's lines are
// its events, then its checkpoints.
type lineCounter struct {
	w io.Writer
	n int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	for _, b := range p[:n] {
		if b == '\n' {
			c.n++
		}
	}
	return n, err
}

// writeAtomic writes path with fn through a temporary file in the same
// directory, renamed over path only once fn and the sync have succeeded.
// Its own errors are the file system's, which name the file.
func writeAtomic(path string, fn func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// exitUnproven is the exit status of prove when none of the operation's
// events is covered by a signed checkpoint yet.
const exitUnproven = exitCode(2)

func newAuditProveCmd() *cobra.Command {
	var dsn, dir string
	cmd := &cobra.Command{
		Use:   "prove OP_ID [--out DIR] --store DSN",
		Short: "Print inclusion proofs (C2SP tlog-proof) of one operation's audit events",
		Long: `prove proves that each of an operation's audit events is in its tenant's log, against
the latest signed checkpoint, in the C2SP tlog-proof format: the c2sp.org/tlog-proof@v1
line, "index SEQ" (the event's position in the log), the proof's hashes in base64, a
blank line, then the signed checkpoint. Every proof is checked before it is printed.
Without --out the proofs go to stdout one after another, in the events' order, each
starting at its c2sp.org/tlog-proof@v1 line; with --out each goes to DIR/SEQ.proof.
An event with no proof yet (not sealed, or sealed after the latest checkpoint) is
listed on stderr with the reason; a later run, once the sealer has signed a new
checkpoint, proves it.

Exit status: 0 when at least one event was proven (any others are listed on stderr as
pending); 2 when the operation has events but none is covered by a signed checkpoint
yet; 1 on any other error (no such operation, a store error, a proof that does not
check).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			proofs, err := ledger.ProveAudit(cmd.Context(), s, args[0])
			if err != nil {
				return err
			}
			return writeProofs(cmd, proofs, dir)
		},
	}
	storeFlag(cmd, &dsn)
	cmd.Flags().StringVar(&dir, "out", "", "write one file per event, DIR/SEQ.proof, instead of stdout")
	return cmd
}

// writeProofs writes each proof to stdout or to dir, and lists on stderr
// the events that have none yet.
func writeProofs(cmd *cobra.Command, proofs []ledger.Proof, dir string) error {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("prove: %w", err)
		}
	}
	stderr, proven := cmd.ErrOrStderr(), 0
	for _, p := range proofs {
		if len(p.Text) == 0 {
			fmt.Fprintf(stderr, "%s: no proof yet: %s\n", eventLabel(p.Event), p.Pending)
			continue
		}
		proven++
		if dir == "" {
			if _, err := cmd.OutOrStdout().Write(p.Text); err != nil {
				return fmt.Errorf("prove: %w", err)
			}
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("%d.proof", p.Event.Seq))
		if err := writeAtomic(path, func(w io.Writer) error { _, err := w.Write(p.Text); return err }); err != nil {
			return fmt.Errorf("prove: %w", err)
		}
		fmt.Fprintf(stderr, "%s: %s\n", eventLabel(p.Event), path)
	}
	if proven == 0 {
		fmt.Fprintf(stderr, "idemgate: none of the %d events of %s is covered by a signed checkpoint yet\n",
			len(proofs), proofs[0].Event.OperationID)
		return exitUnproven
	}
	_, err := fmt.Fprintf(stderr, "proved %d of %d events\n", proven, len(proofs))
	return err
}

// eventLabel names an event in a message: its position, or that it has
// none yet, and its kind.
func eventLabel(e audit.Event) string {
	if e.Seq < 0 {
		return fmt.Sprintf("event (unsealed) %s", e.Kind)
	}
	return fmt.Sprintf("event %d %s", e.Seq, e.Kind)
}
