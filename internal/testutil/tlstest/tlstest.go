// Package tlstest makes throwaway certificate authorities and the certificates they issue,
// as PEM files in a test's temporary directory, so TLS tests need no checked-in keys. It is
// for tests only and never trusts anything by itself.
package tlstest

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

// CA is a self-signed certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA certificate as PEM: the file a peer trusts.
	CertFile string
	dir      string
}

// NewCA makes a CA named name, its certificate written under a fresh temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.CertFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Leaf is an issued certificate and its key, as PEM files.
type Leaf struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
}

// Server issues a server certificate for hosts (DNS names or IP addresses), written as
// <name>.pem and <name>-key.pem in the CA's directory (a second call with the same name
// overwrites them).
func (ca *CA) Server(t testing.TB, name string, hosts ...string) Leaf {
	t.Helper()
	tmpl := ca.leafTemplate(t, name, x509.ExtKeyUsageServerAuth)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(t, name, tmpl)
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(t testing.TB, name string) Leaf {
	t.Helper()
	return ca.issue(t, name, ca.leafTemplate(t, name, x509.ExtKeyUsageClientAuth))
}

func (ca *CA) leafTemplate(t testing.TB, name string, usage x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
}

func (ca *CA) issue(t testing.TB, name string, tmpl *x509.Certificate) Leaf {
	t.Helper()
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := Leaf{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem"), Cert: cert}
	writePEM(t, l.CertFile, "CERTIFICATE", der)
	writePEM(t, l.KeyFile, "EC PRIVATE KEY", keyDER)
	return l
}

// TLSCertificate loads l for a tls.Config.
func (l Leaf) TLSCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(l.CertFile, l.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Pool is a pool holding only the CA, for a test's own clients and servers.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writePEM replaces path atomically, as a certificate rotation should, so a reader never
// sees half a file.
func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
