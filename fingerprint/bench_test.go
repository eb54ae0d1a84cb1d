package fingerprint_test

import (
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

// command is a typical API write of about 1 KiB: strings, small integers,
// decimal amounts with two places, a nested object, arrays and literals.
const command = `{
  "customer": {"id": "cus_8f2k3L9qZx", "email": "ops@example.com", "name": "Acme Logistics GmbH",
    "address": {"line1": "Friedrichstrasse 123", "city": "Berlin", "postal_code": "10117", "country": "DE"}},
  "amount_minor": 129999, "currency": "EUR", "amount": 1299.99, "tax_rate": 0.19, "discount": 0.05,
  "capture": true, "statement_descriptor": "ACME ORDER 20240417", "idempotent": null,
  "items": [
    {"sku": "SKU-000123", "quantity": 2, "unit_price": 499.5, "weight_kg": 1.25, "tags": ["fragile", "express"]},
    {"sku": "SKU-000456", "quantity": 1, "unit_price": 300.99, "weight_kg": 0.4, "tags": []},
    {"sku": "SKU-000789", "quantity": 12, "unit_price": 0.75, "weight_kg": 0.02, "tags": ["bulk"]}
  ],
  "shipping": {"method": "dhl_express", "eta_days": 3, "insured": true, "cost": 14.9,
    "coordinates": {"lat": 52.520008, "lon": 13.404954}},
  "metadata": {"order_id": "ORD-2024-04-17-000981", "channel": "agent", "attempt": 1,
    "note": "Deliver between 09:00 and 17:00, ring twice.", "priority": 2, "score": -3.5e-2},
  "created": 1713369600, "expires_in": 86400
}`

// BenchmarkParse is the cost of reading one typical command, the work done
// for every keyed request before anything is reserved.
func BenchmarkParse(b *testing.B) {
	data := []byte(command)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprint.Parse(data, fingerprint.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalize adds the canonical serialization to the parse.
func BenchmarkCanonicalize(b *testing.B) {
	data := []byte(command)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprint.Canonicalize(data, fingerprint.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseNumbers isolates the number checks: literals of the common
// kind, which a scan of their digits accepts, and literals of 16 or 17
// significant digits, which need the exact comparison.
func BenchmarkParseNumbers(b *testing.B) {
	for name, doc := range map[string]string{
		"common": `[1999,0.19,1299.99,-3.5e-2,52.520008,1713369600,0,12,0.75,86400]`,
		"17 digits": `[0.30000000000000004,9007199254740994,1.7976931348623157e308,0.7071067811865476,` +
			`333333333.3333333,3.141592653589793,0.1234567890123456,1152921504606847000,123456789.12345679,2.718281828459045]`,
	} {
		b.Run(name, func(b *testing.B) {
			data := []byte(doc)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fingerprint.Parse(data, fingerprint.Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
