package audit

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Checkpoint is a signed statement of a log's size and root, in the C2SP
// tlog-checkpoint format: the origin line, the size, the root in base64.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// Body is the checkpoint's note text, before signatures.
func (c Checkpoint) Body() string {
	return fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// Sign signs the checkpoint as a note.
func (c Checkpoint) Sign(s note.Signer) ([]byte, error) {
	b, err := note.Sign(&note.Note{Text: c.Body()}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	return b, nil
}

// OpenCheckpoint verifies a signed checkpoint with v and parses it.
func OpenCheckpoint(signed []byte, v note.Verifier) (Checkpoint, error) {
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	return ParseCheckpoint(n.Text)
}

// ParseCheckpoint reads a checkpoint's body (its first three lines; any
// further lines are extensions, which idemgate does not write).
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		return Checkpoint{}, errors.New("checkpoint: want an origin, a size and a root, one per line")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("checkpoint: size %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("checkpoint: root %q", lines[2])
	}
	c := Checkpoint{Origin: lines[0], Size: size}
	copy(c.Root[:], root)
	return c, nil
}

// Origin names a tenant's log in its checkpoints: one log per tenant, so
// that a tenant's export verifies without another's events.
func Origin(name, tenant string) string { return name + "/" + tenant }

// Keygen writes a new Ed25519 signing key to path (mode 0600) and its
// verifier key, in sumdb/note form, to path+".pub", and returns the
// verifier key. It refuses to overwrite a key.
func Keygen(path, name string) (string, error) {
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", fmt.Errorf("keygen: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("keygen: %w", err)
	}
	if _, err := f.WriteString(skey + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("keygen: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return "", fmt.Errorf("keygen: %w", err)
	}
	if err := os.WriteFile(path+".pub", []byte(vkey+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("keygen: %w", err)
	}
	return vkey, nil
}

// LoadSigner reads a signing key from a file written by Keygen.
func LoadSigner(path string) (note.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	s, err := note.NewSigner(string(bytes.TrimSpace(b)))
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return s, nil
}

// LoadVerifier reads a verifier key given as its text or as a file
// holding it.
func LoadVerifier(keyOrPath string) (note.Verifier, error) {
	text := keyOrPath
	if b, err := os.ReadFile(keyOrPath); err == nil {
		text = string(bytes.TrimSpace(b))
	} else if !strings.Contains(keyOrPath, "+") {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	v, err := note.NewVerifier(text)
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	return v, nil
}
