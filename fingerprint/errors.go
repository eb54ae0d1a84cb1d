package fingerprint

import (
	"errors"
	"fmt"
	"strconv"
)

// This file holds what a refusal of the parsers is (the kinds of Error and
// their problem codes) and the bounds they apply (Limits).

// Default limits, chosen for API command bodies: generous for real payloads,
// small enough that a hostile one cannot exhaust memory or the stack.
const (
	DefaultMaxBytes = 1 << 20
	DefaultMaxDepth = 64
)

// The kinds of Error; test with errors.Is.
var (
	ErrSyntax        = errors.New("invalid JSON")
	ErrInvalidUTF8   = errors.New("invalid UTF-8")
	ErrInvalidEscape = errors.New("invalid escape")
	ErrDuplicateKey  = errors.New("duplicate member name")
	ErrTooDeep       = errors.New("nesting too deep")
	ErrTooLarge      = codedError("document too large", "payload_too_large")
	ErrNumberRange   = errors.New("number out of range")
	ErrUnsupported   = errors.New("unsupported value")
	// ErrInexactNumber is a number whose canonical form would denote another
	// value (9007199254740993 would become 9007199254740992): two different
	// amounts must never share a fingerprint.
	ErrInexactNumber = errors.New("number cannot be represented exactly")
	// ErrFormSyntax is a form body that cannot be read one way only: a ';'
	// between pairs, which some servers take for '&'.
	ErrFormSyntax = errors.New("invalid form body")
	// ErrUnsupportedMediaType is a body whose Content-Type is neither JSON
	// nor a form, on a route that does not take opaque bodies.
	ErrUnsupportedMediaType = codedError("unsupported media type", "unsupported_media_type")
)

// coded is a kind of refusal that names its problem code (contract.Coded):
// the HTTP contract answers it with that code, wherever it is wrapped.
type coded struct{ msg, code string }

func codedError(msg, code string) error { return &coded{msg, code} }

func (c *coded) Error() string       { return c.msg }
func (c *coded) ProblemCode() string { return c.code }

// Error reports why a document was refused: its kind (one of the Err values
// above), the byte offset in the input and the JSON Pointer of the value
// being read, so that a client can find the fault in its own payload.
type Error struct {
	Kind   error
	Offset int
	Path   string
	Detail string
}

// Error implements error.
func (e *Error) Error() string {
	where := "at offset " + strconv.Itoa(e.Offset)
	if e.Offset < 0 {
		where = "in value"
	}
	path := e.Path
	if path == "" {
		path = "/"
	}
	msg := e.Kind.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return fmt.Sprintf("%s %s (path %s)", msg, where, path)
}

// Unwrap returns the kind, for errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

// ProblemCode names the HTTP contract's problem (contract.Coded): a body
// over its bound is payload_too_large, any other refusal invalid_command,
// and nothing was reserved.
func (e *Error) ProblemCode() string {
	if c, ok := e.Kind.(*coded); ok {
		return c.code
	}
	return "invalid_command"
}

// Limits bound what Parse, ParseForm and Body accept. Zero fields take the
// defaults.
type Limits struct {
	MaxBytes  int // size of the whole document in bytes
	MaxDepth  int // nested arrays and objects
	MaxFields int // pairs of a form body, empty ones counted (ParseForm)

	// Rounding is RFC 8785 as written: numbers are rounded to the nearest
	// double (333333333.33333329 becomes 333333333.3333333, 1e-400 becomes
	// 0), and member names that only a case-insensitive decoder takes for
	// one ("f" and "F") are accepted. Never for fingerprints, where a
	// rounded amount would share the fingerprint of another, and a second
	// name in another case would be what the upstream reads; it is there
	// for the RFC's own test vectors and for tools that must agree with
	// other RFC 8785 implementations.
	Rounding bool
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxFields <= 0 {
		l.MaxFields = DefaultMaxFields
	}
	return l
}
