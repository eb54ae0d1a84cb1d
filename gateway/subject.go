package gateway

import (
	"crypto/x509/pkix"
	"strings"
)

// canonicalSubject is how Go writes (pkix.Name.String, RFC 2253) the
// distinguished name s, which clientSubject compares cert_subject with as
// text: "O=acme,CN=bot" or "CN=bot, O=acme" name the same certificate as
// "CN=bot,O=acme" but would never match it. ok is false when s holds what
// this reading does not judge (an attribute type Go writes as an OID, a
// value in hex, a repeated CN…): such a subject is taken as written.
func canonicalSubject(s string) (canon string, ok bool) {
	var n pkix.Name
	for _, rdn := range splitUnescaped(s, ',') {
		// Go writes a certificate's values of one type as one RDN
		// ("OU=ops+OU=eu"), whatever RDNs the certificate holds them in.
		for _, atv := range splitUnescaped(rdn, '+') {
			typ, value, found := strings.Cut(atv, "=")
			if !found {
				return "", false
			}
			v, ok := unescapeDN(value)
			if !ok || !setAttribute(&n, strings.ToUpper(strings.TrimSpace(typ)), v) {
				return "", false
			}
		}
	}
	return n.String(), true
}

// setAttribute sets one attribute of the types pkix.Name writes by name.
func setAttribute(n *pkix.Name, typ, v string) bool {
	lists := map[string]*[]string{"O": &n.Organization, "OU": &n.OrganizationalUnit, "C": &n.Country,
		"L": &n.Locality, "ST": &n.Province, "STREET": &n.StreetAddress, "POSTALCODE": &n.PostalCode}
	if l, ok := lists[typ]; ok {
		*l = append(*l, v)
		return true
	}
	single := map[string]*string{"CN": &n.CommonName, "SERIALNUMBER": &n.SerialNumber}
	if p, ok := single[typ]; ok && *p == "" {
		*p = v
		return true
	}
	return false
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

// isCanonicalSubject reports whether s is written as Go writes it, or is
// one canonicalSubject does not judge.
func isCanonicalSubject(s string) bool {
	canon, ok := canonicalSubject(s)
	return !ok || canon == s
}
