package fingerprint_test

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

// jcsDir holds the RFC 8785 vectors, copied into the repository (see its
// README for their source and licence).
var jcsDir = filepath.Join("testdata", "jcs")

// TestJCSVectors reproduces the reference implementation's input/output pairs
// byte for byte, with numbers rounded as RFC 8785 is written; in the default
// strict mode every vector but values.json and structures.json gives the
// same bytes.
func TestJCSVectors(t *testing.T) {
	dir := jcsDir
	inputs, err := filepath.Glob(filepath.Join(dir, "input", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) != 6 {
		t.Fatalf("found %d input vectors, want 6", len(inputs))
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, "output", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := fingerprint.Canonicalize(src, fingerprint.Limits{Rounding: true})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("canonical form differs\n got: %s\nwant: %s", got, want)
			}
			if name == "values.json" || name == "structures.json" {
				return // refused in strict mode: TestJCSStrict
			}
			if strict, err := fingerprint.Canonicalize(src, fingerprint.Limits{}); err != nil || string(strict) != string(want) {
				t.Errorf("strict mode: %s, %v", strict, err)
			}
		})
	}
}

// TestJCSStrict: two vectors hold what the default mode refuses, saying
// where. values.json's 333333333.33333329 is a value no double holds (its
// canonical form, 333333333.3333333, is another number); structures.json's
// {"f":…,"F":5} holds two names Go's encoding/json takes for one.
func TestJCSStrict(t *testing.T) {
	for name, want := range map[string]struct {
		kind         error
		path, detail string
	}{
		"values.json":     {fingerprint.ErrInexactNumber, "/numbers/0", "333333333.33333329 would become 333333333.3333333"},
		"structures.json": {fingerprint.ErrDuplicateKey, "/1/f/F", `"F" and "f" are one name to a case-insensitive decoder`},
	} {
		src, err := os.ReadFile(filepath.Join(jcsDir, "input", name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = fingerprint.Canonicalize(src, fingerprint.Limits{})
		var fe *fingerprint.Error
		if !errors.As(err, &fe) || !errors.Is(err, want.kind) || fe.Path != want.path || fe.Detail != want.detail {
			t.Errorf("%s: got %v, want %v at %s: %s", name, err, want.kind, want.path, want.detail)
		}
	}
}

// TestES6Numbers checks all 100,000 number serializations of the reference
// data set, and that the file read is the one its README describes.
func TestES6Numbers(t *testing.T) {
	path := filepath.Join(jcsDir, "es6numbers-100k.txt.gz")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	sc := bufio.NewScanner(gz)
	lines, failures := 0, 0
	var buf []byte
	for sc.Scan() {
		line := sc.Text()
		sum.Write([]byte(line + "\n"))
		lines++
		hexBits, want, ok := strings.Cut(line, ",")
		if !ok {
			t.Fatalf("line %d: no comma: %q", lines, line)
		}
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		if err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		f := math.Float64frombits(bits)
		buf = fingerprint.AppendNumber(buf[:0], f)
		if string(buf) != want {
			failures++
			if failures <= 10 {
				t.Errorf("line %d: %s: got %s, want %s", lines, hexBits, buf, want)
			}
		}
		// Through the parser too, in the strict mode: the expected form
		// denotes its double exactly, so it canonicalizes to itself.
		if got, err := fingerprint.Canonicalize([]byte(want), fingerprint.Limits{}); err != nil || string(got) != want {
			failures++
			if failures <= 10 {
				t.Errorf("line %d: parsing %s: got %s, %v", lines, want, got, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines != 100_000 {
		t.Fatalf("read %d lines, want 100000", lines)
	}
	const fileSHA = "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7"
	if got := hex.EncodeToString(sum.Sum(nil)); got != fileSHA {
		t.Errorf("number file SHA-256 = %s, want %s", got, fileSHA)
	}
	if failures > 0 {
		t.Errorf("%d of %d numbers differ", failures, lines)
	}
}
