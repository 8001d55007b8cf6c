package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/testutil/tlstest"
)

// These tests hold TLS (SPEC 3 `ingest.tls` and a forward sink's `tls`, SPEC 7 `hyp server
// --tls-cert --tls-key --client-ca`) to what crosses the network: every certificate is made
// at test time by a private CA, and refusals are checked from outside with Go clients.

// tlsClient trusts ca and presents cert, if given, whatever CAs the server asks for (Go
// would otherwise withhold a certificate the server's CA list does not name, and the
// server would never get to refuse it). Each call makes a fresh transport, so its first
// request does a new handshake.
func tlsClient(ca *tlstest.CA, cert ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if len(cert) == 1 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// postStatus posts body to url and returns the status, or the error of a request that got
// no answer.
func postStatus(client *http.Client, url string, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = header
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// refused holds a request to having got no 2xx answer.
func refused(t *testing.T, what string, status int, err error) {
	t.Helper()
	t.Logf("%s: status %d, err %v", what, status, err)
	if err == nil && status >= 200 && status < 300 {
		t.Errorf("%s: answered %d, want the request refused", what, status)
	}
}

// forwardChunk is one well-formed forward request of a single row with the given id, as a
// token holder could send it, so only TLS can refuse it.
func forwardChunk(token string, id, seq int) (http.Header, []byte) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("X-Hyp-Gateway", "tls-probe")
	h.Set("X-Hyp-Partition", "source=probe")
	h.Set("X-Hyp-Batch-Id", fmt.Sprintf("probe-%d", seq))
	h.Set("X-Hyp-Seq-Range", fmt.Sprintf("%d-%d", seq, seq))
	body := fmt.Sprintf(`{"id":%d,"source":"probe","_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-12-01T00:00:00Z"}`+"\n", id, seq)
	return h, []byte(body)
}

// TestTLSForwardMutualExactlyOnce runs `hyp server` with mutual TLS and a daemon whose
// forward sink has a tls block: every row arrives once, and a client without a
// certificate, one with a certificate of another CA, and plain HTTP are all refused and
// store nothing. The server's certificate is then rotated under it: a bad file keeps the
// old one serving and is counted, a good one is served to the next handshake, and the
// sink goes on delivering.
func TestTLSForwardMutualExactlyOnce(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "hyp-ca")
	other := tlstest.NewCA(t, "other-ca")
	srvLeaf := ca.Server(t, "server", "127.0.0.1")
	gw := ca.Client(t, "gateway")
	gwCert := gw.TLSCertificate(t)

	srvHome, srvAddr, tokens := newServerHome(t)
	if err := os.Chmod(tokens, 0o640); err != nil {
		t.Fatal(err)
	}
	base := "https://" + srvAddr
	srv := startHypProbe(t, "tls server", nil, tlsClient(ca, gwCert), base+"/healthz",
		"server", "--home", srvHome, "--listen", srvAddr, "--token-file", tokens,
		"--tls-cert", srvLeaf.CertFile, "--tls-key", srvLeaf.KeyFile, "--client-ca", ca.CertFile)
	if out := srv.out.String(); !strings.Contains(out, "token file is readable by group or others") || !strings.Contains(out, tokens) || !strings.Contains(out, "0640") {
		t.Errorf("no warning naming the group-readable token file %s and its mode:\n%s", tokens, out)
	}

	home, addr := t.TempDir(), freePort(t)
	sinkYAML := forwardSinkYAML("central", base, tokens) +
		fmt.Sprintf("    tls: {ca_file: %q, cert_file: %q, key_file: %q}\n", ca.CertFile, gw.CertFile, gw.KeyFile)
	writeDaemonYAML(t, home, addr, "", sinkYAML)
	startHypDaemon(t, home, addr)
	f := newFeeder(0)
	deliver := func() {
		t.Helper()
		for _, s := range []string{"web", "db", "api"} {
			f.ingest(t, addr, "logs", s, 150)
		}
		requireRun(t, home, "central", f.take())
	}
	deliver()
	deliver()
	if !checkExactlyOnce(t, "server after two runs", serverIDs(t, srvHome, []string{"logs"}), f.want) {
		t.FailNow()
	}

	token := "s3cr3t-gateway-token"
	seq := 1
	probe := func(client *http.Client, url string, id int) (int, error) {
		h, body := forwardChunk(token, id, seq)
		seq++
		return postStatus(client, url+"/v1/ingest/logs", h, body)
	}
	// Ids from 1,000,000 on are refused requests: none may be stored.
	st, err := probe(tlsClient(ca), base, 1_000_000)
	refused(t, "no client certificate", st, err)
	st, err = probe(tlsClient(ca, other.Client(t, "intruder").TLSCertificate(t)), base, 1_000_001)
	refused(t, "client certificate of another CA", st, err)
	st, err = probe(&http.Client{Timeout: 10 * time.Second}, "http://"+srvAddr, 1_000_002)
	refused(t, "plain HTTP to the TLS port", st, err)
	// The same request with the CA's client certificate is stored: only TLS refused the others.
	const controlID = 900_000
	if st, err := probe(tlsClient(ca, gwCert), base, controlID); err != nil || st != 200 {
		t.Fatalf("control request with a good client certificate: %d %v", st, err)
	}
	f.want["logs"][controlID] = true
	checkExactlyOnce(t, "server after the refused requests", serverIDs(t, srvHome, []string{"logs"}), f.want)

	// Rotation: a bad certificate file keeps the old pair serving and counts a failure.
	failures := func() float64 {
		t.Helper()
		return metricSumAt(t, tlsClient(ca, gwCert), base, "hyp_tls_reload_failures_total", `endpoint="listener"`)
	}
	if n := failures(); n != 0 {
		t.Fatalf("hyp_tls_reload_failures_total = %v before any rotation, want 0", n)
	}
	if err := os.WriteFile(srvLeaf.CertFile, []byte("-----BEGIN CERTIFICATE-----\nbad\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	served := func(where string) []byte {
		t.Helper()
		resp, err := tlsClient(ca, gwCert).Get(base + "/healthz")
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Raw
	}
	if got := served("bad certificate file"); !bytes.Equal(got, srvLeaf.Cert.Raw) {
		t.Error("with a bad certificate file the server no longer serves the last good certificate")
	}
	if n := failures(); n != 1 {
		t.Errorf("hyp_tls_reload_failures_total = %v after a bad certificate file, want 1", n)
	}
	rotated := ca.Server(t, "server", "127.0.0.1")
	if got := served("rotated certificate"); !bytes.Equal(got, rotated.Cert.Raw) {
		t.Error("after the certificate files changed the server still serves the old certificate")
	}
	deliver()
	checkExactlyOnce(t, "server after rotation", serverIDs(t, srvHome, []string{"logs"}), f.want)
	srv.stop(t)
}

// TestTLSDaemonIngestListener serves the daemon's ingest API over HTTPS with ingest.tls,
// first without client certificates, then, restarted with client_ca_file, with mutual TLS:
// only requests over TLS with a certificate of that CA store rows.
func TestTLSDaemonIngestListener(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "hyp-ca")
	other := tlstest.NewCA(t, "other-ca")
	leaf := ca.Server(t, "ingest", "127.0.0.1")
	appCert := ca.Client(t, "app").TLSCertificate(t)
	home, addr := t.TempDir(), freePort(t)
	write := func(clientCA string) {
		t.Helper()
		cfg := fmt.Sprintf("ingest:\n  listen: %s\n  tls: {cert_file: %q, key_file: %q", addr, leaf.CertFile, leaf.KeyFile)
		if clientCA != "" {
			cfg += fmt.Sprintf(", client_ca_file: %q", clientCA)
		}
		cfg += "}\ncache:\n  flush_interval: 500ms\nsinks: {}\n"
		if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := "https://" + addr
	want := map[string]map[int]bool{"logs": {}}
	next := 0
	ingest := func(what string, client *http.Client, url string, ok bool) {
		t.Helper()
		h := http.Header{"Content-Type": {"application/x-ndjson"}}
		st, err := postStatus(client, url+"/v1/ingest/logs", h, rows(next, 10, "app"))
		if !ok {
			refused(t, what, st, err)
			next += 10
			return
		}
		if err != nil || st != 200 {
			t.Fatalf("%s: %d %v", what, st, err)
		}
		for id := next; id < next+10; id++ {
			want["logs"][id] = true
		}
		next += 10
	}
	plain := &http.Client{Timeout: 10 * time.Second}

	write("")
	d := startHypProbe(t, "daemon", nil, tlsClient(ca), base+"/healthz", "daemon", "--home", home)
	ingest("HTTPS without a client certificate, none asked for", tlsClient(ca), base, true)
	ingest("plain HTTP to the TLS port", plain, "http://"+addr, false)
	d.stop(t)

	write(ca.CertFile)
	startHypProbe(t, "daemon (mutual TLS)", nil, tlsClient(ca, appCert), base+"/healthz", "daemon", "--home", home)
	ingest("client certificate of the client CA", tlsClient(ca, appCert), base, true)
	ingest("no client certificate", tlsClient(ca), base, false)
	ingest("client certificate of another CA", tlsClient(ca, other.Client(t, "intruder").TLSCertificate(t)), base, false)
	ingest("plain HTTP to the mutual TLS port", plain, "http://"+addr, false)
	checkExactlyOnce(t, "daemon cache", serverIDs(t, home, []string{"logs"}), want)
}

// TestTLSServerFlagErrors: TLS flags that do not go together are usage errors naming the
// flag; files that cannot be loaded fail the start naming the file.
func TestTLSServerFlagErrors(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "hyp-ca")
	leaf := ca.Server(t, "server", "127.0.0.1")
	srvHome, srvAddr, tokens := newServerHome(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, c := range []struct {
		flags []string
		code  int
		want  string
	}{
		{[]string{"--tls-cert", leaf.CertFile}, 2, "--tls-cert needs --tls-key"},
		{[]string{"--tls-key", leaf.KeyFile}, 2, "--tls-key needs --tls-cert"},
		{[]string{"--client-ca", ca.CertFile}, 2, "--client-ca needs --tls-cert and --tls-key"},
		{[]string{"--tls-cert", missing, "--tls-key", leaf.KeyFile}, 1, missing},
		{[]string{"--tls-cert", leaf.CertFile, "--tls-key", leaf.KeyFile, "--client-ca", missing}, 1, missing},
	} {
		args := append([]string{"server", "--listen", srvAddr, "--token-file", tokens}, c.flags...)
		r := runHyp(t, srvHome, time.Minute, args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", c.flags, r.code, c.code, c.want, r)
		}
	}
}
