package httpidem

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/contract"
)

// keyFromHeader reads the one Idempotency-Key header of r; two are refused,
// since nobody can tell which one the client meant.
func keyFromHeader(r *http.Request, name string) (key string, present bool, err error) {
	values := r.Header.Values(name)
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
		key, err = contract.ParseKey(strings.TrimSpace(values[0]))
		return key, true, err
	}
	return "", true, fmt.Errorf("%d %s headers; send one", len(values), name)
}
