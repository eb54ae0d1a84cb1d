package steps

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// HeaderText is an approval's headers as both stores keep them: JSON of
// name → values ("{}" for none), and nil (NULL) for an approval that kept
// none (see ledger.Approval.Headers).
func HeaderText(h http.Header) *string {
	if h == nil {
		return nil
	}
	b, _ := json.Marshal(h) // a map of strings to strings always encodes
	text := string(b)
	return &text
}

// ParseHeaders reads what HeaderText wrote ("" for NULL: none).
func ParseHeaders(text string) (http.Header, error) {
	if text == "" {
		return nil, nil
	}
	var h http.Header
	if err := json.Unmarshal([]byte(text), &h); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	return h, nil
}
