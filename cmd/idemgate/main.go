// Command idemgate makes API writes safe to retry. Each subcommand lives in
// its own file; this one only assembles them and turns an error into exit
// status 1 with the reason on stderr.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "idemgate",
		Short: "Safe retries for API writes made by AI agents and other retrying clients",
		Long: `idemgate gives every intended write one identity (an Idempotency-Key), reserves it
atomically before any side effect, binds it to a fingerprint of the request,
replays the stored answer to retries and keeps an honest "unknown" state when
nobody knows what happened.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newCanonicalizeCmd(), newFingerprintCmd(), newMigrateCmd(), newOpsCmd(), newServeCmd(), newOpsAPICmd(), newDemoCmd(), newCallCmd(), newMCPCmd(), newApprovalsCmd(), newAuditCmd(), newReconcileCmd(), newDrillCmd(), newRelayCmd(), newEffectsCmd(), newReloadCmd(), newConsumeCmd())
	return root
}

func main() {
	err := newRoot().Execute()
	var code exitCode
	switch {
	case errors.As(err, &code):
		os.Exit(int(code))
	case err != nil:
		fmt.Fprintln(os.Stderr, "idemgate:", err)
		os.Exit(1)
	}
}
