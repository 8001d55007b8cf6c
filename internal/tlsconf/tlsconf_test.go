package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hyp-project/hyp/internal/testutil/tlstest"
)

// dial makes one TLS connection between srv and cli over loopback and returns the
// certificate the server presented, or the first error either side saw. The server writes
// one byte after its handshake and the client reads it, so a client certificate the server
// refuses fails the client too (in TLS 1.3 the client's handshake ends before the server
// has checked it).
func dial(t *testing.T, srv, cli *tls.Config) (*x509.Certificate, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		if err := tc.Handshake(); err != nil {
			srvErr <- err
			return
		}
		_, err = tc.Write([]byte{1})
		srvErr <- err
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		<-srvErr
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		<-srvErr
		return nil, err
	}
	if err := <-srvErr; err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

func count(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

type logBuf struct{ bytes.Buffer }

func testOptions(t *testing.T) (Options, prometheus.Counter, *logBuf) {
	t.Helper()
	c, err := FailureCounter(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	var lb logBuf
	return Options{Logger: slog.New(slog.NewTextHandler(&lb, nil)), Failures: c}, c, &lb
}

// clientTrusting trusts ca and always presents cert, if given: Go would otherwise withhold
// a certificate the server's CA list does not name, and the server would never refuse it.
func clientTrusting(ca *tlstest.CA, cert ...tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if len(cert) == 1 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return cfg
}

func mustServer(t *testing.T, f ServerFiles, o Options) *Server {
	t.Helper()
	s, err := NewServer(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServerFollowsCertificateFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "srv", "127.0.0.1")
	o, failures, logs := testOptions(t)
	s := mustServer(t, ServerFiles{CertFile: first.CertFile, KeyFile: first.KeyFile}, o)
	cfg := s.Config()
	served := func(where string) *x509.Certificate {
		t.Helper()
		got, err := dial(t, cfg, clientTrusting(ca))
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		return got
	}
	if got := served("first"); !got.Equal(first.Cert) {
		t.Fatalf("served serial %v, want the first certificate %v", got.SerialNumber, first.Cert.SerialNumber)
	}

	second := ca.Server(t, "srv", "127.0.0.1") // rewrites both files
	if got := served("rotated"); !got.Equal(second.Cert) {
		t.Fatalf("after rotation served serial %v, want the new one %v", got.SerialNumber, second.Cert.SerialNumber)
	}

	// A bad file keeps the last good pair serving, and is counted once however many
	// handshakes see it.
	if err := os.WriteFile(second.CertFile, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := served("bad file"); !got.Equal(second.Cert) {
			t.Fatalf("handshake %d with a bad file served serial %v, want the last good one %v", i, got.SerialNumber, second.Cert.SerialNumber)
		}
	}
	if n := count(t, failures); n != 1 {
		t.Errorf("hyp_tls_reload_failures_total = %v after one bad file, want 1", n)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), second.CertFile) {
		t.Errorf("no error naming %s logged:\n%s", second.CertFile, logs)
	}

	// Removed altogether: still the old pair.
	if err := os.Remove(second.KeyFile); err != nil {
		t.Fatal(err)
	}
	if got := served("key removed"); !got.Equal(second.Cert) {
		t.Fatalf("with the key removed served serial %v, want %v", got.SerialNumber, second.Cert.SerialNumber)
	}
	if n := count(t, failures); n != 2 {
		t.Errorf("hyp_tls_reload_failures_total = %v after a second bad change, want 2", n)
	}

	third := ca.Server(t, "srv", "127.0.0.1")
	if got := served("repaired"); !got.Equal(third.Cert) {
		t.Fatalf("after repair served serial %v, want %v", got.SerialNumber, third.Cert.SerialNumber)
	}
}

func TestServerReloadRereadsNow(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "srv", "127.0.0.1")
	o, failures, _ := testOptions(t)
	s := mustServer(t, ServerFiles{CertFile: first.CertFile, KeyFile: first.KeyFile}, o)
	second := ca.Server(t, "srv", "127.0.0.1")
	s.Reload()
	// The files have not changed since Reload read them: the handshake reuses what it read.
	got, err := dial(t, s.Config(), clientTrusting(ca))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(second.Cert) || count(t, failures) != 0 {
		t.Fatalf("after Reload: serial %v (want %v), failures %v", got.SerialNumber, second.Cert.SerialNumber, count(t, failures))
	}
}

func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	srv := ca.Server(t, "srv", "127.0.0.1")
	good := ca.Client(t, "gateway").TLSCertificate(t)
	foreign := other.Client(t, "intruder").TLSCertificate(t)
	clientCA := tlstest.NewCA(t, "clients").CertFile // rewritten below
	if err := os.WriteFile(clientCA, mustRead(t, ca.CertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	o, failures, _ := testOptions(t)
	s := mustServer(t, ServerFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: clientCA}, o)
	if !s.MutualTLS() {
		t.Fatal("MutualTLS() = false with a client CA")
	}
	cfg := s.Config()
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no client certificate", nil, false},
		{"certificate of another CA", []tls.Certificate{foreign}, false},
		{"certificate of the client CA", []tls.Certificate{good}, true},
	} {
		_, err := dial(t, cfg, clientTrusting(ca, c.certs...))
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
	}

	// The client CA file now names the other CA: its clients get in, the first CA's no more.
	if err := os.WriteFile(clientCA, mustRead(t, other.CertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, cfg, clientTrusting(ca, foreign)); err != nil {
		t.Errorf("after the client CA changed, its client was refused: %v", err)
	}
	if _, err := dial(t, cfg, clientTrusting(ca, good)); err == nil {
		t.Error("after the client CA changed, a client of the old CA still got in")
	}

	// A client CA file with no certificate keeps the last pool.
	if err := os.WriteFile(clientCA, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, cfg, clientTrusting(ca, foreign)); err != nil {
		t.Errorf("with a bad client CA file, a client of the last good pool was refused: %v", err)
	}
	if n := count(t, failures); n != 1 {
		t.Errorf("failures = %v, want 1", n)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestClientVerifiesAgainstItsFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	srvLeaf := ca.Server(t, "srv", "127.0.0.1", "central.example")
	srvCfg := &tls.Config{Certificates: []tls.Certificate{srvLeaf.TLSCertificate(t)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	gw := ca.Client(t, "gateway")
	caFile := tlstest.NewCA(t, "unused").CertFile
	if err := os.WriteFile(caFile, mustRead(t, ca.CertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	o, failures, _ := testOptions(t)
	newClient := func(f ClientFiles) *Client {
		t.Helper()
		c, err := NewClient(f, o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	withCA := newClient(ClientFiles{CAFile: caFile, CertFile: gw.CertFile, KeyFile: gw.KeyFile})
	for _, c := range []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"CA file, IP host in the certificate", withCA.Config("127.0.0.1"), true},
		{"CA file, host not in the certificate", withCA.Config("10.9.8.7"), false},
		{"server_name in the certificate", newClient(ClientFiles{CAFile: caFile, CertFile: gw.CertFile, KeyFile: gw.KeyFile, ServerName: "central.example"}).Config("10.9.8.7"), true},
		{"server_name not in the certificate", newClient(ClientFiles{CAFile: caFile, CertFile: gw.CertFile, KeyFile: gw.KeyFile, ServerName: "elsewhere.example"}).Config("127.0.0.1"), false},
		{"system roots do not know a private CA", newClient(ClientFiles{CertFile: gw.CertFile, KeyFile: gw.KeyFile}).Config("127.0.0.1"), false},
		{"insecure_skip_verify", newClient(ClientFiles{CAFile: other.CertFile, CertFile: gw.CertFile, KeyFile: gw.KeyFile, InsecureSkipVerify: true}).Config("127.0.0.1"), true},
		{"no client certificate for a mutual TLS server", newClient(ClientFiles{CAFile: caFile}).Config("127.0.0.1"), false},
	} {
		_, err := dial(t, srvCfg, c.cfg)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
	}

	// The CA file follows a rotation of the central to another CA; a bad file keeps the last.
	cfg := withCA.Config("127.0.0.1")
	rotated := other.Server(t, "srv", "127.0.0.1")
	srvCfg.Certificates = []tls.Certificate{rotated.TLSCertificate(t)}
	if _, err := dial(t, srvCfg, cfg); err == nil {
		t.Fatal("a server certificate of an untrusted CA was accepted")
	}
	if err := os.WriteFile(caFile, mustRead(t, other.CertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srvCfg, cfg); err != nil {
		t.Fatalf("after the CA file changed: %v", err)
	}
	if err := os.WriteFile(caFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srvCfg, cfg); err != nil {
		t.Fatalf("with an empty CA file, the last good CAs were not kept: %v", err)
	}
	if n := count(t, failures); n != 1 {
		t.Errorf("failures = %v, want 1", n)
	}

	// The client certificate follows its files too: a new one from the other CA is offered.
	srvCfg.ClientCAs = other.Pool()
	if _, err := dial(t, srvCfg, cfg); err == nil {
		t.Fatal("the server accepted a client certificate of a CA it does not trust")
	}
	moved := other.Client(t, "gateway")
	if err := os.Rename(moved.CertFile, gw.CertFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(moved.KeyFile, gw.KeyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, srvCfg, cfg); err != nil {
		t.Fatalf("after the client certificate files changed: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	leaf := ca.Server(t, "srv", "127.0.0.1")
	other := ca.Server(t, "other", "127.0.0.1")
	missing := leaf.CertFile + ".missing"
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"server without key", func() error { _, err := NewServer(ServerFiles{CertFile: leaf.CertFile}, Options{}); return err }, "both"},
		{"key of another certificate", func() error {
			_, err := NewServer(ServerFiles{CertFile: leaf.CertFile, KeyFile: other.KeyFile}, Options{})
			return err
		}, leaf.CertFile},
		{"missing client CA", func() error {
			_, err := NewServer(ServerFiles{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile, ClientCAFile: missing}, Options{})
			return err
		}, missing},
		{"CA file that is a key", func() error { _, err := NewClient(ClientFiles{CAFile: leaf.KeyFile}, Options{}); return err }, "no PEM certificate"},
		{"client cert without key", func() error { _, err := NewClient(ClientFiles{CertFile: leaf.CertFile}, Options{}); return err }, "key_file"},
	} {
		err := c.err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

func TestFailureCounterSharesOneFamily(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := FailureCounter(reg, "listener")
	if err != nil {
		t.Fatal(err)
	}
	b, err := FailureCounter(reg, "sink/central")
	if err != nil {
		t.Fatal(err)
	}
	a.Inc()
	b.Add(2)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "hyp_tls_reload_failures_total" || len(mfs[0].GetMetric()) != 2 {
		t.Fatalf("gathered %v, want one hyp_tls_reload_failures_total family of 2 series", mfs)
	}
}
