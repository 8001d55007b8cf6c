// Package tlsconf owns TLS material read from files: a certificate/key pair and a CA pool
// that follow their files (re-read when a file's size, modification time or identity
// changes, checked at each handshake, or at once on Reload), and the tls.Configs that
// hyp's listeners and its forward client build from them.
//
// A file that fails to load never replaces what was loaded before: the old material keeps
// serving, the failure is logged once per change of the files and counted in
// hyp_tls_reload_failures_total. Only the first load can fail a caller. It never opens a
// listener, never decides whom to trust beyond the files it is given, and never accepts
// less than TLS 1.2.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MinVersion is the oldest protocol version hyp speaks on either side.
const MinVersion = tls.VersionTLS12

// Options are what every loaded file reports its reloads to.
type Options struct {
	Logger *slog.Logger // default: discard
	// Failures counts reloads that kept the old material (see FailureCounter); nil counts
	// nothing.
	Failures prometheus.Counter
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

const failuresHelp = "Reloads of changed TLS certificate, key or CA files that failed, so the previously loaded ones kept serving."

// FailureCounter is hyp_tls_reload_failures_total{endpoint}, registered on reg (nil: not
// registered). The listener and every forward sink of one process share one registry, so a
// family some earlier caller registered is reused rather than refused.
func FailureCounter(reg prometheus.Registerer, endpoint string) (prometheus.Counter, error) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_tls_reload_failures_total", Help: failuresHelp}, []string{"endpoint"})
	if reg != nil {
		if err := reg.Register(v); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("register hyp_tls_reload_failures_total: %w", err)
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, fmt.Errorf("register hyp_tls_reload_failures_total: %w", err)
			}
			v = existing
		}
	}
	return v.WithLabelValues(endpoint), nil
}

// fileSig is what a file looked like when it was last read; a different one means the file
// was rewritten or replaced (a rename over it, a symlink swapped as Kubernetes does).
type fileSig struct {
	fi  os.FileInfo
	err string // why it could not be stat'ed
}

func statFile(path string) fileSig {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{err: err.Error()}
	}
	return fileSig{fi: fi}
}

func (a fileSig) same(b fileSig) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil && a.err == b.err
	}
	return a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime()) && os.SameFile(a.fi, b.fi)
}

// watched is a value loaded from files, reloaded when they change. seen is the files'
// state at the last attempt, successful or not, so files that stay bad cost one failure,
// not one per handshake.
type watched[T any] struct {
	what  string // for messages: "certificate pair cert.pem, key.pem"
	files []string
	load  func() (T, error)
	o     Options

	mu   sync.Mutex
	cur  T
	seen []fileSig
}

func newWatched[T any](what string, files []string, load func() (T, error), o Options) (*watched[T], error) {
	w := &watched[T]{what: what, files: files, load: load, o: o}
	w.seen = w.stat()
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.cur = v
	return w, nil
}

func (w *watched[T]) stat() []fileSig {
	sigs := make([]fileSig, len(w.files))
	for i, f := range w.files {
		sigs[i] = statFile(f)
	}
	return sigs
}

// get returns the current value, first re-reading the files if they changed.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	sigs := w.stat()
	changed := false
	for i := range sigs {
		if !sigs[i].same(w.seen[i]) {
			changed = true
			break
		}
	}
	if changed {
		w.reloadLocked(sigs)
	}
	return w.cur
}

// reload re-reads the files whether or not they look changed (SIGHUP).
func (w *watched[T]) reload() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reloadLocked(w.stat())
}

func (w *watched[T]) reloadLocked(sigs []fileSig) {
	w.seen = sigs
	v, err := w.load()
	if err != nil {
		w.o.logger().Error("TLS reload failed; keeping the previously loaded files", "what", w.what, "err", err)
		if w.o.Failures != nil {
			w.o.Failures.Inc()
		}
		return
	}
	w.cur = v
	w.o.logger().Info("TLS files reloaded", "what", w.what)
}

// Pair is a certificate chain and its private key, from two PEM files.
type Pair struct{ w *watched[*tls.Certificate] }

// LoadPair reads certFile and keyFile, which must hold a matching certificate and key.
func LoadPair(certFile, keyFile string, o Options) (*Pair, error) {
	load := func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certificate %s with key %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}
	w, err := newWatched(fmt.Sprintf("certificate %s, key %s", certFile, keyFile), []string{certFile, keyFile}, load, o)
	if err != nil {
		return nil, err
	}
	return &Pair{w}, nil
}

// Certificate is the pair as its files now hold it, or as last loaded if they are bad.
func (p *Pair) Certificate() *tls.Certificate { return p.w.get() }

// Reload re-reads the files now.
func (p *Pair) Reload() { p.w.reload() }

// Pool is a set of CA certificates from one PEM file.
type Pool struct{ w *watched[*x509.CertPool] }

// LoadPool reads file, which must hold at least one PEM certificate.
func LoadPool(file string, o Options) (*Pool, error) {
	load := func() (*x509.CertPool, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", file)
		}
		return p, nil
	}
	w, err := newWatched("CA file "+file, []string{file}, load, o)
	if err != nil {
		return nil, err
	}
	return &Pool{w}, nil
}

// CertPool is the pool as its file now holds it, or as last loaded if it is bad.
func (p *Pool) CertPool() *x509.CertPool { return p.w.get() }

// Reload re-reads the file now.
func (p *Pool) Reload() { p.w.reload() }

// ServerFiles are a listener's TLS files; ClientCAFile, when set, turns on mutual TLS.
type ServerFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

// Server is the TLS side of one listener.
type Server struct {
	pair *Pair
	ca   *Pool // nil: no client certificate asked for

	mu       sync.Mutex
	cert     *tls.Certificate
	pool     *x509.CertPool
	resolved *tls.Config // built for cert and pool, reused until either changes
}

// NewServer loads f's files.
func NewServer(f ServerFiles, o Options) (*Server, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tls: a listener needs both a certificate and a key file")
	}
	s := &Server{}
	var err error
	if s.pair, err = LoadPair(f.CertFile, f.KeyFile, o); err != nil {
		return nil, err
	}
	if f.ClientCAFile != "" {
		if s.ca, err = LoadPool(f.ClientCAFile, o); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// MutualTLS reports whether clients must present a certificate.
func (s *Server) MutualTLS() bool { return s.ca != nil }

// Config is the listener's tls.Config: each handshake gets the current certificate and,
// with mutual TLS, demands a client certificate issued by the current client CAs. HTTP/2
// is not offered: the listeners serve HTTP/1.1 as they do without TLS.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current(), nil
		},
	}
}

func (s *Server) current() *tls.Config {
	cert := s.pair.Certificate()
	var pool *x509.CertPool
	if s.ca != nil {
		pool = s.ca.CertPool()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resolved != nil && cert == s.cert && pool == s.pool {
		return s.resolved
	}
	c := &tls.Config{MinVersion: MinVersion, NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{*cert}}
	if pool != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = pool
	}
	s.cert, s.pool, s.resolved = cert, pool, c
	return c
}

// Reload re-reads every file now (SIGHUP).
func (s *Server) Reload() {
	s.pair.Reload()
	if s.ca != nil {
		s.ca.Reload()
	}
}

// ClientFiles are a forward sink's `tls` block.
type ClientFiles struct {
	// CAFile holds the CAs the server's certificate must chain to; empty means the system's.
	CAFile string
	// CertFile and KeyFile are the client certificate for mutual TLS; both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty means the URL's host.
	ServerName         string
	InsecureSkipVerify bool
}

// Client is the TLS side of connections to one central.
type Client struct {
	f    ClientFiles
	pair *Pair
	ca   *Pool
}

// NewClient loads f's files.
func NewClient(f ClientFiles, o Options) (*Client, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("tls: cert_file and key_file go together")
	}
	c := &Client{f: f}
	var err error
	if f.CertFile != "" {
		if c.pair, err = LoadPair(f.CertFile, f.KeyFile, o); err != nil {
			return nil, err
		}
	}
	if f.CAFile != "" {
		if c.ca, err = LoadPool(f.CAFile, o); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Config is the tls.Config for connections to host (a URL's host without port). It offers
// the current client certificate whenever the server asks for one and, with a CA file,
// verifies the server against the current CAs.
func (c *Client) Config(host string) *tls.Config {
	name := host
	if c.f.ServerName != "" {
		name = c.f.ServerName
	}
	cfg := &tls.Config{MinVersion: MinVersion, ServerName: name}
	if c.pair != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.pair.Certificate(), nil
		}
	}
	switch {
	case c.f.InsecureSkipVerify:
		cfg.InsecureSkipVerify = true
	case c.ca != nil:
		// RootCAs is fixed once a connection starts, and the pool must follow its file, so
		// the chain and name are checked here, as crypto/tls would, against the pool of the
		// moment. The name is the one this config is for: ConnectionState.ServerName is
		// empty for an IP address.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs.PeerCertificates, c.ca.CertPool(), name)
		}
	}
	return cfg
}

func verifyServer(certs []*x509.Certificate, roots *x509.CertPool, name string) error {
	if len(certs) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: name, Intermediates: x509.NewCertPool(), CurrentTime: time.Now()}
	for _, ic := range certs[1:] {
		opts.Intermediates.AddCert(ic)
	}
	if _, err := certs[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
	}
	return nil
}
