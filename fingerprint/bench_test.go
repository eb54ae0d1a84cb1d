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
