package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

// migratingStore is what both stores are: a ledger.Store that can bring its
// schema up to date.
type migratingStore interface {
	ledger.Store
	Migrate(ctx context.Context) error
}

// openStore opens the store a DSN names: sqlite:PATH or postgres://…. A
// command that only reads passes readOnly, so that a mistyped path is an
// error rather than a new, empty database.
func openStore(ctx context.Context, dsn string, readOnly bool) (migratingStore, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path, opts, err := sqlite.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		opts.MustExist = readOnly
		return sqlite.Open(ctx, path, opts)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgres.Open(ctx, dsn, postgres.Options{})
	case dsn == "":
		return nil, errors.New("no store: pass --store or set IDEMGATE_STORE")
	}
	return nil, fmt.Errorf("store %q: want sqlite:PATH or postgres://…", redact(dsn))
}

// redact hides a password in a DSN before it reaches a message.
func redact(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return dsn
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":***@" + host
	}
	return dsn
}

// storeFlag adds --store, defaulting to $IDEMGATE_STORE.
func storeFlag(cmd *cobra.Command, dsn *string) {
	cmd.Flags().StringVar(dsn, "store", os.Getenv("IDEMGATE_STORE"),
		"store DSN: sqlite:PATH[?durability=strict|relaxed&min_free=SIZE] or postgres://…[?durability=…] (default $IDEMGATE_STORE)")
}

// openMigrated opens the store at dsn and migrates it; on an error
// nothing is left open.
func openMigrated(ctx context.Context, dsn string, readOnly bool) (migratingStore, error) {
	store, err := openStore(ctx, dsn, readOnly)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate store: %w", err)
	}
	return store, nil
}
