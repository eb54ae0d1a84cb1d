package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The environment variables that configure an agent's keys: its secret,
// the file that holds it, and its name.
const (
	EnvSecret     = "IDEMGATE_AGENT_SECRET"
	EnvSecretFile = "IDEMGATE_AGENT_SECRET_FILE"
	EnvAgent      = "IDEMGATE_AGENT"
)

// DefaultSecretFile is $XDG_CONFIG_HOME/idemgate/agent-secret, else
// ~/.config/idemgate/agent-secret.
func DefaultSecretFile() (string, error) {
	if dir := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "idemgate", "agent-secret"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("agent secret: no home directory to keep it in (set %s): %w", EnvSecret, err)
	}
	return filepath.Join(home, ".config", "idemgate", "agent-secret"), nil
}

// LoadSecret finds the agent's secret, which is configuration kept apart
// from the journal: a journal deleted, or a new one on another machine
// given the same secret, still derives the same keys (see Keys).
// idemgate call, idemgate mcp and the Python client read it the same way:
//
//  1. file, the one the caller named (--agent-secret-file), else
//     $IDEMGATE_AGENT_SECRET_FILE: it must exist;
//  2. else $IDEMGATE_AGENT_SECRET, the secret itself;
//  3. else DefaultSecretFile, made with a new random secret (0600) the
//     first time: an agent that configured nothing still gets keys that
//     survive its journal, on this machine. Copy that file (or set one of
//     the above) to keep them on another.
func LoadSecret(file string) ([]byte, error) {
	if file == "" {
		file = os.Getenv(EnvSecretFile)
	}
	if file != "" {
		return ReadSecret(file)
	}
	if s := os.Getenv(EnvSecret); s != "" {
		return []byte(s), nil
	}
	path, err := DefaultSecretFile()
	if err != nil {
		return nil, err
	}
	return EnsureSecret(path)
}

// ReadSecret reads the secret a file holds, surrounding white space
// (a final newline) left out.
func ReadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent secret: %w", err)
	}
	return bytes.TrimSpace(b), nil
}

// EnsureSecret reads the secret at path, or makes one there (32 random
// bytes as URL-safe base64, mode 0600, its directory 0700) if there is
// none. Two processes making it at once keep the one written first: the
// secret is written whole to a file of its own, then linked into place,
// which fails if another got there first.
func EnsureSecret(path string) ([]byte, error) {
	if s, err := ReadSecret(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("agent secret: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".agent-secret-*")
	if err != nil {
		return nil, fmt.Errorf("agent secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	_, err = tmp.WriteString(base64.RawURLEncoding.EncodeToString(b) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("agent secret: %w", err)
	}
	return ReadSecret(path)
}
