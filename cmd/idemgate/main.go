// Command idemgate makes API writes safe to retry. Each subcommand lives in
// its own file; this one only assembles them and turns errors into exit codes.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code out of a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "idemgate",
		Short: "Idempotency for API writes made by AI agents and other retrying clients",
		Long: `idemgate gives every intended write one identity (an Idempotency-Key), reserves it
atomically before any side effect, binds it to a fingerprint of the request,
replays the stored answer to retries and keeps an honest "unknown" state when
nobody knows what happened.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newCanonicalizeCmd(), newFingerprintCmd(), newMigrateCmd(), newOpsCmd())
	return root
}

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "idemgate:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
