package audit

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"golang.org/x/mod/sumdb/tlog"
)

// Writer writes an export (docs/design.md): one event per line, in log order,
// each line its leaf bytes, then one {"checkpoint": …} line per checkpoint.
type Writer struct {
	w *bufio.Writer
}

// NewWriter writes an export to w; call Flush at the end.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 1<<16)} }

// Event writes one event line.
func (x *Writer) Event(e Event) error {
	leaf, err := e.Leaf()
	if err != nil {
		return err
	}
	if _, err := x.w.Write(leaf); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return x.w.WriteByte('\n')
}

// Checkpoint writes one signed checkpoint line.
func (x *Writer) Checkpoint(signed []byte) error {
	b, err := CheckpointLine(signed)
	if err != nil {
		return err
	}
	_, err = x.w.Write(append(b, '\n'))
	return err
}

// Flush writes what is buffered.
func (x *Writer) Flush() error { return x.w.Flush() }

// CheckpointLine is the JSON line that holds a signed checkpoint, in an
// export as in a checkpoints file.
func CheckpointLine(signed []byte) ([]byte, error) {
	s := string(signed)
	b, err := json.Marshal(checkpointLine{Checkpoint: &s})
	if err != nil {
		return nil, fmt.Errorf("checkpoint line: %w", err)
	}
	return b, nil
}

// Hashes is a log's stored hashes in memory (tlog's layout: about two per
// leaf), for building proofs of a log small enough to hold.
type Hashes []tlog.Hash

// ReadHashes implements tlog.HashReader.
func (h Hashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, ix := range indexes {
		if ix < 0 || ix >= int64(len(h)) {
			return nil, fmt.Errorf("hash %d not stored", ix)
		}
		out[i] = h[ix]
	}
	return out, nil
}

// Append adds the hashes that leaf number len-of-the-log stores.
func (h *Hashes) Append(n int64, leaf tlog.Hash) error {
	hs, err := tlog.StoredHashesForRecordHash(n, leaf, *h)
	if err != nil {
		return err
	}
	*h = append(*h, hs...)
	return nil
}

// FormatProof is an inclusion proof in the C2SP tlog-proof format: the
// leaf's index, the proof's hashes, and the signed checkpoint it leads to.
func FormatProof(index int64, proof tlog.RecordProof, signedCheckpoint []byte) []byte {
	var b []byte
	b = append(b, "c2sp.org/tlog-proof@v1\n"...)
	b = append(b, fmt.Sprintf("index %d\n", index)...)
	for _, h := range proof {
		b = append(b, base64Line(h)...)
	}
	b = append(b, '\n')
	return append(b, signedCheckpoint...)
}

func base64Line(h tlog.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) + "\n" }
