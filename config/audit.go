package config

import (
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/idemgate/idemgate/audit"
)

// Audit turns the audit log on (docs/design.md, "Audit log"): with it,
// the gateway seals every event into its tenant's Merkle log, signs
// checkpoints with SigningKey, and records the events that are no
// transition (replays, conflicts). Without it, transitions are still
// recorded (they are the operations' history) but not sealed.
type Audit struct {
	SigningKey string `yaml:"signing_key"` // a file written by `idemgate audit keygen`
	// CheckpointEvery and CheckpointInterval say when a checkpoint is
	// signed: once this many events are not covered by one (1000), or once
	// the latest is this old and one is not (10s).
	CheckpointEvery    int64         `yaml:"checkpoint_every"`
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// CheckpointsFile is where each signed checkpoint is appended too:
	// outside the database, a copy its administrator cannot rewrite with it.
	CheckpointsFile string `yaml:"checkpoints_file"`

	line   int
	signer note.Signer
}

// checkAudit loads the signing key at start-up: a missing or bad key is an
// error naming its line, not a log that silently never signs.
func (c *Config) checkAudit() error {
	a := c.Audit
	if a == nil {
		return nil
	}
	if a.SigningKey == "" {
		return c.errorf(a.line, "audit: signing_key is required (make one with `idemgate audit keygen FILE`)")
	}
	if a.CheckpointEvery < 0 || a.CheckpointInterval < 0 {
		return c.errorf(a.line, "audit: checkpoint_every and checkpoint_interval must be positive")
	}
	if a.CheckpointEvery == 0 {
		a.CheckpointEvery = 1000
	}
	if a.CheckpointInterval == 0 {
		a.CheckpointInterval = 10 * time.Second
	}
	a.SigningKey, a.CheckpointsFile = c.relative(a.SigningKey), c.relative(a.CheckpointsFile)
	s, err := audit.LoadSigner(a.SigningKey)
	if err != nil {
		return c.errorf(a.line, "audit: %v", err)
	}
	a.signer = s
	return nil
}

// relative resolves a path of the configuration against its directory.
func (c *Config) relative(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(filepath.Dir(c.file), path)
}

// Signing is how the gateway's sealer signs checkpoints.
func (a *Audit) Signing() audit.Signing {
	return audit.Signing{Signer: a.signer, Name: a.signer.Name(), Every: a.CheckpointEvery, After: a.CheckpointInterval}
}

// Sealer is the configuration's audit sealer over log, nil without an
// audit section: it seals the log's events and signs its checkpoints.
func (c *Config) Sealer(log audit.Log, logger *slog.Logger) *audit.Sealer {
	a := c.Audit
	if a == nil {
		return nil
	}
	return &audit.Sealer{Log: log, Signing: a.Signing(), File: a.CheckpointsFile, Logger: logger}
}
