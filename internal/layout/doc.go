// Package layout keeps the module's import graph in the shape the Layout
// section of docs/design.md describes: domain at the centre, adapters at
// the edges, only cmd/ wiring the stores in. It has no code of its own; its
// test reads the graph with go list and names every import a rule forbids,
// so a layout mistake fails go test ./... instead of waiting for a review.
package layout
