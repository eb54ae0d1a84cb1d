package steps

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// HeaderText is an approval's headers as both stores keep them: JSON of
// name → values, nil (NULL) for none.
func HeaderText(h http.Header) *string {
	if len(h) == 0 {
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
