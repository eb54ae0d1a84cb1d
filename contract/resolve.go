package contract

import (
	"encoding/json"
	"time"
)

// ResolveRequest is the body of POST …/operations/{id}/resolve
// (docs/design.md, "The web page" and "Reconciliation"): an admin's
// verdict on an unknown operation.
type ResolveRequest struct {
	// State is "succeeded", "failed" or "prepared" (proven not applied).
	State string `json:"state"`
	// Note says what was checked; it is audited, and required.
	Note string `json:"note"`
	// Response is the upstream's answer, when the operator found it
	// (headers: name → array of values; body: text): retries replay it.
	Response *Answer `json:"response,omitempty"`
	// Result is an action's result (docs/design.md, "Actions"), when the
	// operator found it: retries replay it. Not with Response.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultRef is the upstream's reference for the effect.
	ResultRef string `json:"result_ref,omitempty"`
	// Duplicate says the effect was made twice despite the checks.
	Duplicate bool `json:"duplicate,omitempty"`
}

// EffectResolveRequest is the body of POST …/effects/{id}/resolve: an
// admin's verdict on an effect that waits for an operator, or whose
// delivery is unknown.
type EffectResolveRequest struct {
	State     string `json:"state"`
	Note      string `json:"note"`
	ResultRef string `json:"result_ref,omitempty"`
}

// ResolvedReplay is the replay of an operation an operator resolved
// without the upstream's answer: the operation's summary with its
// resolution, so that an agent cannot take the body for the upstream's.
type ResolvedReplay struct {
	Summary
	Resolution ResolutionView `json:"resolution"`
	StatusURL  string         `json:"status_url,omitempty"`
}

// ResolutionView says who resolved an operation without the upstream's
// answer, when, and their note, as its history records them (the tenant
// reads the same history on the control API). By and Note are empty when
// the history cannot be read.
type ResolutionView struct {
	Detail string     `json:"detail"`
	By     string     `json:"by,omitempty"`
	Note   string     `json:"note,omitempty"`
	At     *time.Time `json:"at,omitempty"`
}
