package keyed

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// standIn is what an operation keeps of an answer too large to keep
// (docs/design.md, "An answer too large to keep"): the effect happened
// and its fate is known, so the operation is final as its answer says;
// the caller that ran it got the answer whole; every retry gets the
// answer's status and a contract.NotKept body that names the answer by
// its size and digest.
func standIn(given *ledger.Response, size int64, sha string, limit int64) *ledger.Response {
	body, _ := json.Marshal(contract.NotKept{Code: contract.CodeAnswerNotKept, Size: size, SHA256: sha, Limit: limit,
		Detail: fmt.Sprintf("the effect's answer was %d bytes, over the %d this route keeps: the caller that ran it "+
			"was given it whole, and it is not kept; this is its status, and its size and digest", size, limit)})
	h := map[string][]string{"Content-Type": {"application/json"}, contract.HeaderAnswerNotKept: {"true"}}
	for k, v := range given.Header {
		if !strings.EqualFold(k, "Content-Type") && !strings.EqualFold(k, "Content-Length") &&
			!strings.EqualFold(k, "Content-Encoding") {
			h[k] = append([]string(nil), v...)
		}
	}
	return &ledger.Response{Status: given.Status, Header: h, Body: body}
}

// NotKept reports whether a stored answer is a stand-in for one too
// large to keep.
func NotKept(r *ledger.Response) bool {
	if r == nil {
		return false
	}
	for k, v := range r.Header {
		if strings.EqualFold(k, contract.HeaderAnswerNotKept) && len(v) > 0 {
			return true
		}
	}
	return false
}
