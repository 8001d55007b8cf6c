// Package daemon owns the long-running process: it opens the home's single Node, serves the
// ingest listener and the control socket, and runs the flush, compaction and retention
// loops until its context ends, then drains: stop accepting, flush, release the lock. It
// never holds state of its own beyond those goroutines.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/ingest"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/node"
	"github.com/hyp-project/hyp/internal/server"
	"github.com/hyp-project/hyp/internal/sink"
	"github.com/hyp-project/hyp/internal/tlsconf"
)

// walFlushBytes triggers a flush before the interval when the log grows this large, which
// bounds both replay time and flush memory under heavy ingest.
const walFlushBytes = 64 << 20

// idleMemoryEvery is how often the daemon checks whether ingest went quiet (memory loop).
const idleMemoryEvery = 10 * time.Second

// retentionInterval is how often retention runs in the daemon.
const retentionInterval = 5 * time.Minute

// The public listener's request bodies are bounded in memory and in time (httpbody.Guard).
// The budget admits bodyBudgetBodies bodies of ingest.max_body_bytes at once (64 MiB for the
// default 16 MiB), and never less than minBodyBudget, so small limits still leave room for
// many concurrent requests. A body must arrive within bodyGrace plus one second per
// bodyMinRate bytes: a stalled client is cut off after 10 s, a trickling one as soon as it
// averages under 64 KiB/s, while a full 16 MiB body may take up to 266 s.
const (
	bodyBudgetBodies = 4
	minBodyBudget    = 64 << 20
	bodyGrace        = 10 * time.Second
	bodyMinRate      = 64 << 10
)

// idleTimeout closes keep-alive connections that send nothing, so idle clients cannot pile
// up connections (and their buffers) without bound.
const idleTimeout = 2 * time.Minute

// Run serves the daemon until ctx is done. Ready is called once the listeners accept.
func Run(ctx context.Context, dir string, cfg *config.Config, log *slog.Logger, ready func(ingestAddr string)) error {
	return serve(ctx, dir, cfg, listener{addr: cfg.Ingest.Listen, tls: cfg.Ingest.TLS}, log, ready, func(_ context.Context, _ *node.Node, ingest http.Handler) (front, error) {
		return front{public: ingest, close: func() {}}, nil
	})
}

// ServerOptions configure `hyp server`.
type ServerOptions struct {
	Listen    string
	TokenFile string
	RateLimit float64 // rows per second, 0 = none
	// TLS, when set, makes the listener HTTPS (--tls-cert, --tls-key), with mutual TLS when
	// it names a client CA (--client-ca).
	TLS *config.ListenerTLS
}

// RunServer serves the central receiver (SPEC 5) on o.Listen until ctx is done: the same
// node as the daemon (cache, sinks, retention, control socket), with the forward protocol
// as its public listener. Rows are deduped by the ledger in `<home>/server/ledger.db`.
func RunServer(ctx context.Context, dir string, cfg *config.Config, o ServerOptions, log *slog.Logger, ready func(addr string)) error {
	tokens, err := server.LoadTokens(o.TokenFile)
	if err != nil {
		return err
	}
	warnTokenFileMode(o.TokenFile, log)
	sopts := server.Options{Tokens: tokens, MaxBodyBytes: cfg.Ingest.MaxBodyBytes, RateLimit: o.RateLimit, Logger: log,
		MaxGatewaysPerToken: cfg.Server.MaxGatewaysPerToken}
	return serve(ctx, dir, cfg, listener{addr: o.Listen, tls: o.TLS}, log, ready, func(ctx context.Context, n *node.Node, ingest http.Handler) (front, error) {
		sopts.Registerer = n.Reg
		var f front
		var err error
		if cfg.Server.Cluster != nil {
			f.public, f.close, err = clusterFront(ctx, cfg.Server.Cluster, o.Listen, sopts, n)
		} else {
			f, err = localFront(ctx, dir, sopts, n)
		}
		if err != nil {
			return front{}, err
		}
		mux := http.NewServeMux()
		// /metrics comes from the ingest handler, which serves the node's registry.
		mux.Handle("GET /metrics", ingest)
		mux.Handle("/", f.public)
		f.public = mux
		return f, nil
	})
}

// warnTokenFileMode warns when others than the owner may read the bearer tokens.
func warnTokenFileMode(path string, log *slog.Logger) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn("token file is readable by group or others; make it readable by its owner only (chmod 600)",
		"file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
}

// localFront is the single-node server: forwarded rows go to the node's cache, deduped by
// the ledger in <home>/server/ledger.db.
// Its control socket also answers `hyp server status` from the ledger, which the running
// server holds locked.
func localFront(ctx context.Context, dir string, o server.Options, n *node.Node) (front, error) {
	path := home.Ledger(dir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return front{}, err
	}
	led, err := ledger.Open(path)
	if err != nil {
		return front{}, err
	}
	if err := server.Recover(ctx, n.Cache, led); err != nil {
		led.Close()
		return front{}, fmt.Errorf("recover ledger: %w", err)
	}
	o.KnownGateways = server.KnownGateways(n.Cache.Status())
	h, err := server.NewHandler(n.Cache, led, o)
	if err != nil {
		led.Close()
		return front{}, err
	}
	return front{public: h, control: server.StatusHandler(led), close: func() { led.Close() }}, nil
}

// clusterFront is one replica of a cluster (SPEC 5): forwarded rows go to the shared
// PostgreSQL ledger and the lake, and the replica competes for the committer role until the
// server stops.
func clusterFront(ctx context.Context, cc *config.Cluster, listen string, o server.Options, n *node.Node) (http.Handler, func(), error) {
	m := cc.Lake.Maintain
	upkeep, err := config.ParseSchedule(m.Schedule)
	if err != nil {
		return nil, nil, fmt.Errorf("server.cluster.lake.maintain.schedule: %w", err)
	}
	c, err := cluster.Open(ctx, cluster.Options{
		Postgres: cc.Postgres, Lake: sink.LakeOptions(cc.Lake, cluster.Writer, cluster.Writer), CommitInterval: time.Duration(cc.CommitInterval),
		GroupWindow: time.Duration(cc.GroupWindow), GroupBytes: cc.GroupBytes,
		Maintain:         lake.MaintainOptions{Compact: m.Compact, ExpireOlderThan: time.Duration(m.ExpireOlderThan), RetainLast: m.RetainLast},
		MaintainSchedule: upkeep,
		Addr:             listen, Registerer: n.Reg, Logger: o.Logger,
	})
	if err != nil {
		return nil, nil, err
	}
	// Gateways any replica stored rows of count against the cap; the ones that arrive later
	// each replica counts on its own.
	rep, err := cluster.Status(ctx, cc.Postgres)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	for _, g := range rep.Gateways {
		o.KnownGateways = append(o.KnownGateways, g.Gateway)
	}
	h, err := server.NewClusterHandler(c, o)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(runCtx)
	}()
	return h, func() {
		stop()
		<-done
		c.Close()
	}, nil
}

// errStarting is why /healthz is 503 before the daemon serves.
var errStarting = errors.New("the daemon is starting")

// frontend builds the public listener's handler for a node.
type frontend func(ctx context.Context, n *node.Node, ingest http.Handler) (front, error)

// front is what a frontend built: public serves the public listener; control, when not nil,
// serves the control socket's /v1/server/ paths; close runs after both stop.
type front struct {
	public, control http.Handler
	close           func()
}

// limitMemory sets the runtime's soft memory limit the config asks for, unless the operator
// set GOMEMLIMIT, which the runtime has already applied. The collector keeps the runtime's
// GOGC (100, or the environment's): 150 measured 2-4% more records a second on 2026-12-01,
// but once OTLP/JSON stopped allocating a 4 MiB chunk a request it measured the same CPU a
// record as 100 for 10-15 MiB more peak RSS, which the 100 MiB target cannot spare
// (docs/PERFORMANCE-LOG.md, "2026-12-04: memory under load").
func limitMemory(limit int64, log *slog.Logger) {
	if limit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(limit)
	log.Debug("soft memory limit set", "bytes", limit)
}

// listener is where the public listener binds, and its TLS files if it serves HTTPS.
type listener struct {
	addr string
	tls  *config.ListenerTLS
}

// listen binds l. With TLS its certificates follow their files (see tlsconf), reload counts
// its failures, and the returned Server is what SIGHUP reloads; it is nil without TLS.
func (l listener) listen(reg prometheus.Registerer, log *slog.Logger) (net.Listener, *tlsconf.Server, error) {
	var ts *tlsconf.Server
	if l.tls != nil {
		fails, err := tlsconf.FailureCounter(reg, "listener")
		if err != nil {
			return nil, nil, err
		}
		ts, err = tlsconf.NewServer(tlsconf.ServerFiles{CertFile: l.tls.CertFile, KeyFile: l.tls.KeyFile, ClientCAFile: l.tls.ClientCAFile},
			tlsconf.Options{Logger: log, Failures: fails})
		if err != nil {
			return nil, nil, fmt.Errorf("listener tls: %w", err)
		}
	}
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listener: %w", err)
	}
	if ts != nil {
		ln = tls.NewListener(ln, ts.Config())
	}
	return ln, ts, nil
}

func serve(ctx context.Context, dir string, cfg *config.Config, pub listener, log *slog.Logger, ready func(string), front frontend) error {
	if err := home.Prepare(dir); err != nil {
		return err
	}
	limitMemory(cfg.MemoryLimitBytes, log)
	n, err := node.Open(ctx, dir, cfg, log)
	if errors.Is(err, cache.ErrLocked) {
		return fmt.Errorf("another hyp daemon (or a CLI command) holds %s: %w", dir, err)
	}
	if err != nil {
		return err
	}
	if err := n.Sinks.Err(); err != nil {
		n.Close(ctx)
		return err
	}
	budget, err := httpbody.NewBudget(max(bodyBudgetBodies*cfg.Ingest.MaxBodyBytes, minBodyBudget))
	if err != nil {
		n.Close(ctx)
		return err
	}
	var isReady atomic.Bool
	ih, err := ingest.NewHandler(n, ingest.Options{
		MaxBodyBytes: cfg.Ingest.MaxBodyBytes,
		Registerer:   n.Reg,
		Gatherer:     n.Reg,
		// Not ready once the log has failed for good: reads still work, ingest cannot.
		Ready: func() error {
			if !isReady.Load() {
				return errStarting
			}
			return n.Cache.Err()
		},
		Logger: log,
		Budget: budget,
	})
	if err != nil {
		n.Close(ctx)
		return err
	}
	fr, err := front(ctx, n, ih)
	if err != nil {
		n.Close(ctx)
		return err
	}
	defer fr.close()
	h := fr.public
	// The control socket serves the ingest handler unguarded: it is local and its clients
	// are the home's owner.
	if h, err = httpbody.Guard(h, budget, httpbody.Pace{Grace: bodyGrace, MinRate: bodyMinRate}); err != nil {
		n.Close(ctx)
		return err
	}
	ln, tlsSrv, err := pub.listen(n.Reg, log)
	if err != nil {
		n.Close(ctx)
		return err
	}
	sock, err := control.Listen(home.Socket(dir))
	if err != nil {
		ln.Close()
		n.Close(ctx)
		return err
	}
	loopCtx, stopLoops := context.WithCancel(context.Background())
	ingestSrv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout}
	// Control requests (a `hyp sink run` waiting on an export) end with the loops at drain.
	ctlSrv := &http.Server{Handler: control.Handler(n, ih, fr.control), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return loopCtx }}
	go ingestSrv.Serve(ln)
	go ctlSrv.Serve(sock)

	var wg sync.WaitGroup
	loop := func(name string, every time.Duration, poll time.Duration, due func() bool, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := time.Now()
			t := time.NewTicker(poll)
			defer t.Stop()
			for {
				select {
				case <-loopCtx.Done():
					return
				case <-t.C:
				}
				if time.Since(last) < every && (due == nil || !due()) {
					continue
				}
				last = time.Now()
				if err := fn(loopCtx); err != nil && loopCtx.Err() == nil {
					log.Error(name+" failed", "err", err)
				}
			}
		}()
	}
	flushEvery := time.Duration(cfg.Cache.FlushInterval)
	loop("flush", flushEvery, min(flushEvery, 200*time.Millisecond), func() bool { return n.Cache.WALSize() > walFlushBytes }, n.Flush)
	compactEvery := time.Duration(cfg.Cache.Compaction.Interval)
	loop("compaction", compactEvery, min(compactEvery, time.Second), nil, func(ctx context.Context) error {
		_, err := n.Compact(ctx, node.CompactRequest{})
		return err
	})
	loop("retention", retentionInterval, time.Second, nil, func(ctx context.Context) error {
		_, err := n.Prune(ctx, false)
		return err
	})
	// Once ingest has gone quiet, the heap a burst grew goes back to the OS at once: the
	// runtime returns it only slowly by itself, and a daemon that runs beside the workloads
	// it watches should idle small.
	var lastSeq int64
	busy := false
	loop("memory", idleMemoryEvery, time.Second, nil, func(context.Context) error {
		if s := n.Cache.NextSeq(); s != lastSeq {
			lastSeq, busy = s, true
		} else if busy {
			busy = false
			n.Cache.DropSpares()
			debug.FreeOSMemory()
		}
		return nil
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.Sinks.Run(loopCtx)
	}()

	isReady.Store(true)
	log.Info("hyp running", "home", dir, "listen", ln.Addr().String(), "tls", tlsSrv != nil, "mutual_tls", tlsSrv != nil && tlsSrv.MutualTLS(), "socket", home.Socket(dir))
	if ready != nil {
		ready(ln.Addr().String())
	}
	// SIGHUP re-reads the listener's TLS files and the config, and applies what a running
	// node can (retention, sink schedules, datasets, withhold_sources and maintain) without dropping a
	// connection.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-hup:
			if tlsSrv != nil {
				tlsSrv.Reload()
			}
			next, err := config.Load(dir, cfg.File, sink.Checks())
			if err != nil {
				log.Error("config reload refused; keeping the running config", "err", err)
				continue
			}
			applied, needRestart := n.Reload(next)
			log.Info("config reload done", "applied", len(applied), "needs_restart", len(needRestart))
		}
	}

	log.Info("hyp daemon draining")
	isReady.Store(false)
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ingestSrv.Shutdown(shutCtx)
	stopLoops()
	_ = ctlSrv.Shutdown(shutCtx)
	wg.Wait()
	err = n.Close(shutCtx)
	_ = os.Remove(home.Socket(dir))
	if err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	log.Info("hyp daemon stopped")
	return nil
}
