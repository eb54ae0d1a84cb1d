package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newMigrateCmd() *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "migrate --store DSN",
		Short: "Create or update the store's schema",
		Long: `migrate applies the embedded schema migrations that the store lacks. It is safe
to run twice, and from several processes at once: each migration is applied once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := openStore(cmd.Context(), dsn, false)
			if err != nil {
				return err
			}
			defer s.Close()
			if err := s.Migrate(cmd.Context()); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "migrated")
			return err
		},
	}
	storeFlag(cmd, &dsn)
	return cmd
}
