package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/audit"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "The tamper-evident audit log: keys, export, proofs, traces and offline verification",
		Long: `audit works with idemgate's audit log: one RFC 6962 Merkle log per tenant, whose
signed checkpoints (C2SP tlog-checkpoint, Ed25519) let anyone holding the verifier key
check an export offline. export, prove and trace read a store; keygen and verify do not.`,
	}
	cmd.AddCommand(newAuditKeygenCmd(), newAuditVerifyCmd(), newAuditExportCmd(), newAuditProveCmd(),
		newAuditTraceCmd())
	return cmd
}

func newAuditKeygenCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "keygen FILE",
		Short: "Write a new Ed25519 signing key to FILE (0600) and its verifier key to FILE.pub",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vkey, err := audit.Keygen(args[0], name)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), vkey)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "idemgate", "the key's name, which checkpoints' origins start with")
	return cmd
}

// exitTampered is the exit status of an export that does not verify.
const exitTampered = exitCode(3)

func newAuditVerifyCmd() *cobra.Command {
	var key string
	var earlier []string
	var unsignedTail bool
	cmd := &cobra.Command{
		Use:   "verify EXPORT --key PUB [--checkpoint FILE]... [--allow-unsigned-tail]",
		Short: "Check an export offline: every event at its place, every checkpoint signed and matching",
		Long: `verify reads an export (JSON Lines: the events, then their checkpoints) and checks it
with the verifier key alone: each event in canonical form at its position, each checkpoint
signed by the key and equal to the tree of the events before it, no two checkpoints of one
size with different roots, none beyond the export's end, and every event covered by a signed
checkpoint. --checkpoint adds checkpoints kept from earlier (a checkpoints file, an older
export), so that a log truncated behind them is caught. Events after the last checkpoint are
vouched for by nothing (one forged and appended there looks like one not sealed yet):
--allow-unsigned-tail accepts them, unverified, as of a live log exported before its seal.
It prints the first bad event and why, and exits 3; or a summary, and exits 0.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return errors.New("--key is required: the verifier key, or the file holding it")
			}
			v, err := audit.LoadVerifier(key)
			if err != nil {
				return err
			}
			rep, err := audit.Verify(args[0], v, earlier...)
			if err == nil && !unsignedTail {
				if err = rep.Covered(); err != nil {
					err = fmt.Errorf("%w; verify a later export, or accept them unverified with "+
						"--allow-unsigned-tail", err)
				}
			}
			var tampered *audit.Tampered
			if errors.As(err, &tampered) {
				fmt.Fprintf(cmd.ErrOrStderr(), "idemgate: %s does not verify: %v\n", args[0], err)
				return exitTampered
			}
			if err != nil {
				return err
			}
			return verified(cmd, rep)
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "verifier key (text, or a file such as audit.key.pub)")
	cmd.Flags().StringArrayVar(&earlier, "checkpoint", nil, "a file of checkpoints kept from earlier (repeatable)")
	cmd.Flags().BoolVar(&unsignedTail, "allow-unsigned-tail", false,
		"accept events after the last signed checkpoint, unverified (a live log's export)")
	return cmd
}

// verified prints the summary of an export that verified.
func verified(cmd *cobra.Command, rep audit.Report) error {
	tail := ""
	if rep.Unsigned > 0 {
		tail = fmt.Sprintf("; %d events after it not signed, accepted unverified (--allow-unsigned-tail)", rep.Unsigned)
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "ok: %s, %d events, %d checkpoints, the largest of size %d (root %x)%s\n",
		rep.Origin, rep.Events, rep.Checkpoints, rep.Largest.Size, rep.Largest.Root[:8], tail)
	return err
}
