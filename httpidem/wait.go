package httpidem

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// preferWait reads "Prefer: wait=N" (RFC 7240), capped at max: how long a
// copy of a request in flight waits for its outcome (keyed.Command.Wait).
func preferWait(r *http.Request, max time.Duration) (time.Duration, bool) {
	for _, v := range r.Header.Values(contract.HeaderPrefer) {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			secs, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || secs <= 0 {
				continue
			}
			return min(time.Duration(secs)*time.Second, max), true
		}
	}
	return 0, false
}
