package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made in the test, for real TLS
// handshakes: server certificates for 127.0.0.1 and client certificates
// for client_ca.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named cn.
func NewCA(tb testing.TB, cn string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a pool of this CA alone, for a client that trusts it.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate for 127.0.0.1 and localhost, in PEM.
func (ca *CA) Server(tb testing.TB, cn string) (certPEM, keyPEM []byte) {
	tb.Helper()
	return ca.issue(tb, pkix.Name{CommonName: cn}, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate of subject, in PEM.
func (ca *CA) Client(tb testing.TB, subject pkix.Name) (certPEM, keyPEM []byte) {
	tb.Helper()
	return ca.issue(tb, subject, x509.ExtKeyUsageClientAuth)
}

// ClientPair is Client as a tls.Certificate, for a client's Certificates.
func (ca *CA) ClientPair(tb testing.TB, subject pkix.Name) tls.Certificate {
	tb.Helper()
	c, k := ca.Client(tb, subject)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		tb.Fatal(err)
	}
	return pair
}

func (ca *CA) issue(tb testing.TB, subject pkix.Name, usage x509.ExtKeyUsage) ([]byte, []byte) {
	key := newKey(tb)
	tmpl := &x509.Certificate{SerialNumber: serial(tb), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// WriteFile writes data to dir/name (0600) and returns its path.
func WriteFile(tb testing.TB, dir, name string, data []byte) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
