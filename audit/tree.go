package audit

import (
	"crypto/sha256"

	"golang.org/x/mod/sumdb/tlog"
)

// Frontier is a compact range of an RFC 6962 tree grown leaf by leaf: the
// roots of its perfect subtrees, at most one per bit of the size, so that
// the tree's hash at any size costs O(log n) memory. It is how an export of
// millions of events is verified in bounded memory.
type Frontier struct {
	size  int64
	nodes []tlog.Hash // the perfect subtrees, largest first
}

// Size is the number of leaves appended.
func (f *Frontier) Size() int64 { return f.size }

// Append adds the next leaf's hash.
func (f *Frontier) Append(h tlog.Hash) {
	f.nodes = append(f.nodes, h)
	// Merge equal subtrees: as many as the trailing ones of the old size.
	for n := f.size; n&1 == 1; n >>= 1 {
		last := len(f.nodes) - 1
		f.nodes = append(f.nodes[:last-1], tlog.NodeHash(f.nodes[last-1], f.nodes[last]))
	}
	f.size++
}

// Root is the tree's hash (RFC 6962's MTH) at its current size: the
// perfect subtrees folded from the right.
func (f *Frontier) Root() tlog.Hash {
	if len(f.nodes) == 0 {
		return tlog.Hash(sha256.Sum256(nil)) // RFC 6962: the hash of the empty string
	}
	r := f.nodes[len(f.nodes)-1]
	for i := len(f.nodes) - 2; i >= 0; i-- {
		r = tlog.NodeHash(f.nodes[i], r)
	}
	return r
}
