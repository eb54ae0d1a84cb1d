package contract

import (
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/ledger"
)

// ParseKey reads an Idempotency-Key value: a bare token, or a quoted
// Structured-Field string ("…", with \" and \\ escapes) per the IETF draft,
// which is unquoted. Either way the key is 1 to 255 printable ASCII
// characters.
func ParseKey(value string) (string, error) {
	key := value
	if strings.HasPrefix(value, `"`) {
		var err error
		if key, err = unquoteSF(value); err != nil {
			return "", err
		}
	}
	if key == "" || len(key) > ledger.MaxKeyLen {
		return "", fmt.Errorf("key must be 1 to %d characters, got %d", ledger.MaxKeyLen, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("key must be printable ASCII: byte 0x%02x at %d", c, i)
		}
	}
	return key, nil
}

// unquoteSF decodes a Structured-Field string (RFC 8941, 3.3.3).
func unquoteSF(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", fmt.Errorf("unterminated quoted key")
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", fmt.Errorf("bad escape in quoted key at %d", i)
			}
			b.WriteByte(s[i])
		case c == '"':
			return "", fmt.Errorf("unescaped quote in quoted key at %d", i)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
