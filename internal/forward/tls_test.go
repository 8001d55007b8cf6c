package forward

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hyp-project/hyp/internal/testutil/tlstest"
	"github.com/hyp-project/hyp/internal/tlsconf"
)

// tlsCentral is a central on 127.0.0.1 that demands a client certificate of ca and counts
// the requests that reach its handler.
func tlsCentral(t *testing.T, ca *tlstest.CA) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"accepted":3,"duplicates":0}`)
	}))
	s.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "central", "127.0.0.1").TLSCertificate(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, &n
}

func TestSendOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	a, aSeen := tlsCentral(t, ca)
	b, bSeen := tlsCentral(t, ca)
	gw := ca.Client(t, "gw-1")
	clientTLS := func(f tlsconf.ClientFiles) *tlsconf.Client {
		t.Helper()
		c, err := tlsconf.NewClient(f, tlsconf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	withCert := clientTLS(tlsconf.ClientFiles{CAFile: ca.CertFile, CertFile: gw.CertFile, KeyFile: gw.KeyFile})

	// Every replica gets the client certificate and is checked against the CA file.
	for _, s := range []*httptest.Server{a, b} {
		c := newTestClient(t, s.URL, newFakeClock(), nil, func(o *Options) { o.URLs = []string{a.URL, b.URL}; o.TLS = withCert })
		c.reps.cur = map[*httptest.Server]int{a: 0, b: 1}[s]
		if _, err := c.Send(context.Background(), testChunk()); err != nil {
			t.Fatalf("Send over mutual TLS to %s: %v", s.URL, err)
		}
	}
	if aSeen.Load() != 1 || bSeen.Load() != 1 {
		t.Fatalf("requests reached a %d, b %d times, want once each", aSeen.Load(), bSeen.Load())
	}

	// Refused before any request reaches the central: no client certificate, or a central
	// the CA file does not vouch for.
	other := tlstest.NewCA(t, "other")
	for name, tc := range map[string]*tlsconf.Client{
		"no client certificate": clientTLS(tlsconf.ClientFiles{CAFile: ca.CertFile}),
		"another CA file":       clientTLS(tlsconf.ClientFiles{CAFile: other.CertFile, CertFile: gw.CertFile, KeyFile: gw.KeyFile}),
	} {
		c := newTestClient(t, a.URL, newFakeClock(), nil, func(o *Options) { o.TLS = tc })
		if _, err := c.Send(context.Background(), testChunk()); kind(err) != "retryable" {
			t.Errorf("%s: Send = %v (%s), want retryable", name, err, kind(err))
		}
	}
	if aSeen.Load() != 1 {
		t.Errorf("refused connections reached the handler: %d requests, want 1", aSeen.Load())
	}
}

// A plain http:// URL to a TLS port gets that server's own 400, which must not quarantine
// the chunk as poison.
func TestSendPlainHTTPToTLSPort(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	s, seen := tlsCentral(t, ca)
	c := newTestClient(t, strings.Replace(s.URL, "https://", "http://", 1), newFakeClock(), nil, nil)
	_, err := c.Send(context.Background(), testChunk())
	if kind(err) != "tls_required" {
		t.Fatalf("Send = %v (%s), want tls_required", err, kind(err))
	}
	if seen.Load() != 0 {
		t.Errorf("%d requests reached the handler, want 0", seen.Load())
	}
}

func TestTLSExcludesHTTPClient(t *testing.T) {
	tc, err := tlsconf.NewClient(tlsconf.ClientFiles{InsecureSkipVerify: true}, tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{URLs: []string{"https://x"}, Token: "t", Gateway: "gw", TLS: tc, HTTPClient: &http.Client{}})
	if err == nil {
		t.Fatal("New accepted both TLS and HTTPClient")
	}
}
