package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/idemgate/idemgate/ledger"
)

// MCPIntentKey INTERIM (i30-exec): i30-ns's.
func MCPIntentKey(tool, principal, intent string) string {
	esc := strings.NewReplacer("%", "%25", "/", "%2F")
	k := esc.Replace(tool) + "/" + esc.Replace(principal) + "/" + esc.Replace(intent)
	if len(k) > ledger.MaxKeyLen {
		sum := sha256.Sum256([]byte(k))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return k
}
