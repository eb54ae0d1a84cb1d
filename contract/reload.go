package contract

import "time"

// ReloadPath is where an operator asks a running gateway to re-read its
// configuration file (POST; docs/design.md, "Identity, transport and
// operations"). `idemgate reload --gateway URL` calls it; SIGHUP does the
// same without a token.
const ReloadPath = ControlPrefix + "/config/reload"

// ReloadView is the answer of a reload that was applied. One that was
// refused is a problem (invalid_request) whose detail names the file and
// line, and the running configuration stays.
type ReloadView struct {
	Reloaded bool      `json:"reloaded"`
	At       time.Time `json:"at"`
}
