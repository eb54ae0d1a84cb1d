// Package inboxtest helps the broker adapters' tests: an inbox.Observer
// that remembers what it heard.
package inboxtest

import (
	"slices"
	"sync"

	"github.com/idemgate/idemgate/inbox"
)

// Heard is an inbox.Observer that remembers what it heard, for a test to
// read while the consumer runs.
type Heard struct {
	mu          sync.Mutex
	parked      []string
	unconfirmed int
	ups         int
	up          bool
}

var _ inbox.Observer = (*Heard)(nil)

// Parked implements inbox.Observer.
func (h *Heard) Parked(_, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.parked = append(h.parked, reason)
}

// ParkUnconfirmed implements inbox.Observer.
func (h *Heard) ParkUnconfirmed(string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unconfirmed++
}

// Connected implements inbox.Observer.
func (h *Heard) Connected(_ string, up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up = up
	if up {
		h.ups++
	}
}

// Up is the last state reported: connected and consuming, or not.
func (h *Heard) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

// Ups counts the reports of being up.
func (h *Heard) Ups() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ups
}

// Reasons are the reasons of the parks confirmed, in order.
func (h *Heard) Reasons() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.parked)
}

// Unconfirmed counts the parks not confirmed.
func (h *Heard) Unconfirmed() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unconfirmed
}
