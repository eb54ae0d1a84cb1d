package fingerprint

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
)

// Two member names a case-insensitive decoder takes for one are refused as
// a duplicate (issue 24, 7.2): `when`, business_key and concurrency_key
// read the first, while Go's encoding/json (and .NET's, Jackson's with
// ACCEPT_CASE_INSENSITIVE_PROPERTIES) fills its field from the last, so
// {"environment":"staging","Environment":"production"} would deploy to
// production without the approval production asks for.
//
// Which folding: strings.EqualFold's (Unicode simple case folding, which
// encoding/json uses to match names) and full case folding (CaseFolding.txt
// C and F: "ß" is "ss", "İ" is "i̇", as Java's toLowerCase and Python's
// casefold see them), together. A pair equal under either is refused, since
// the parser cannot know the upstream's decoder; the cost is refusing an
// object that holds both "straße" and "STRASSE", which no real API sends.
// Unicode normalization ("é" and "e\u0301") is not folded: decoders do not
// normalize names.

// fullFold is full case folding; it is stateless and safe to share.
var fullFold = cases.Fold()

// foldKey is name's key under both foldings: full case folding, then each
// rune replaced by the least of its simple-folding orbit (an ASCII letter
// by its lower case), so that two names share a key when either folding
// makes them equal. A name already its own key (lower-case ASCII, the
// common case) is returned as it is, without allocating.
func foldKey(name string) string {
	upper := false
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= utf8.RuneSelf:
			return strings.Map(orbitRune, fullFold.String(name))
		case 'A' <= c && c <= 'Z':
			upper = true
		}
	}
	if upper {
		return strings.ToLower(name)
	}
	return name
}

// orbitRune is the least rune of r's simple-folding orbit (as
// encoding/json's foldName picks it), an ASCII letter in lower case.
func orbitRune(r rune) rune {
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	if 'A' <= least && least <= 'Z' {
		least += 'a' - 'A'
	}
	return least
}

// folds are the names of one object (or form) by their fold key. It stays
// nil, and costs nothing, while every name is its own key: a name that is
// not must then be compared with the ones before it.
type folds map[string]string

// add records name, new to the object whose earlier names are in names,
// and returns an earlier name that a case-insensitive decoder takes for
// the same one.
func (f *folds) add(names map[string]any, name string) (string, bool) {
	key := foldKey(name)
	if *f == nil {
		if key == name {
			return "", false
		}
		*f = make(folds, len(names)+1)
		for n := range names {
			(*f)[n] = n // each was its own key, and they differ
		}
	}
	if other, ok := (*f)[key]; ok {
		return other, true
	}
	(*f)[key] = name
	return "", false
}

// foldDetail says why two names are one.
func foldDetail(name, other string) string {
	return fmt.Sprintf("%q and %q are one name to a case-insensitive decoder", name, other)
}
