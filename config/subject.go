package config

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"slices"
	"strings"
)

// A cert_subject is compared with the exact RDN sequence of a client
// certificate's subject, written as RFC 2253 writes it (the last RDN
// first, "CN=bot,O=acme"; pkix.RDNSequence.String), the values of a
// multi-valued RDN (a SET, which has no order) sorted. Not with
// pkix.Name.String: that keeps one CN of several (the last) and writes
// the attributes in an order of its own, so that a certificate with a
// second CN, or its RDNs in another order, would be taken for another.

// CertSubject is the subject of cert as cert_subject is compared with
// it; "" if its subject cannot be read as an RDN sequence (no principal
// is then bound to it).
func CertSubject(cert *x509.Certificate) string {
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(cert.RawSubject, &seq); err != nil || len(rest) > 0 {
		return ""
	}
	return writeRDNs(seq)
}

// writeRDNs writes seq as RFC 2253 does, each RDN's values sorted by
// their text.
func writeRDNs(seq pkix.RDNSequence) string {
	out := make(pkix.RDNSequence, len(seq))
	for i, rdn := range seq {
		sorted := slices.Clone(rdn)
		slices.SortStableFunc(sorted, func(a, b pkix.AttributeTypeAndValue) int {
			return strings.Compare(pkix.RDNSequence{{a}}.String(), pkix.RDNSequence{{b}}.String())
		})
		out[i] = sorted
	}
	return out.String()
}

// attributeTypes are the attribute types RFC 2253 (and Go) write by name.
var attributeTypes = map[string]asn1.ObjectIdentifier{
	"C": {2, 5, 4, 6}, "O": {2, 5, 4, 10}, "OU": {2, 5, 4, 11}, "CN": {2, 5, 4, 3}, "SERIALNUMBER": {2, 5, 4, 5},
	"L": {2, 5, 4, 7}, "ST": {2, 5, 4, 8}, "STREET": {2, 5, 4, 9}, "POSTALCODE": {2, 5, 4, 17},
}

// canonicalSubject is the distinguished name s as certSubject writes the
// subject of a certificate whose RDNs s names: "CN=bot, O=acme" or
// "cn=bot,o=acme" name the same RDNs as "CN=bot,O=acme" but would never
// match it as text. The order of the RDNs is kept: "O=acme,CN=bot" is
// another sequence, another certificate's. ok is false when s holds what
// this reading does not judge (an attribute type written as an OID, a
// value in hex, an empty value…): such a subject is taken as written.
func canonicalSubject(s string) (canon string, ok bool) {
	rdns := splitUnescaped(s, ',')
	seq := make(pkix.RDNSequence, 0, len(rdns))
	for i := len(rdns) - 1; i >= 0; i-- { // RFC 2253 writes the last RDN first
		var set pkix.RelativeDistinguishedNameSET
		for _, atv := range splitUnescaped(rdns[i], '+') {
			typ, value, found := strings.Cut(atv, "=")
			if !found {
				return "", false
			}
			oid, known := attributeTypes[strings.ToUpper(strings.TrimSpace(typ))]
			v, ok := unescapeDN(value)
			if !known || !ok {
				return "", false
			}
			set = append(set, pkix.AttributeTypeAndValue{Type: oid, Value: v})
		}
		seq = append(seq, set)
	}
	return writeRDNs(seq), true
}

// splitUnescaped splits s at each sep that no backslash escapes.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unescapeDN reads a value as RFC 2253 escapes it (a backslash before a
// special character); surrounding spaces are not the value's. A value in
// hex (#…) or with a hex pair escape is not judged.
func unescapeDN(v string) (string, bool) {
	v = strings.TrimLeft(v, " ")
	if strings.HasPrefix(v, "#") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			b.WriteByte(v[i])
			continue
		}
		if i++; i == len(v) || !strings.ContainsRune(`,+"\<>;=# `, rune(v[i])) {
			return "", false
		}
		b.WriteByte(v[i])
	}
	out := b.String()
	if strings.HasSuffix(v, " ") && !strings.HasSuffix(v, `\ `) {
		out = strings.TrimRight(out, " ")
	}
	return out, out != ""
}

// isCanonicalSubject reports whether s is written as certSubject writes
// a subject, or is one canonicalSubject does not judge.
func isCanonicalSubject(s string) bool {
	canon, ok := canonicalSubject(s)
	return !ok || canon == s
}
