// Package server owns the receiving side of the forward protocol (SPEC 5): the HTTP handler
// of `hyp server` that authenticates gateways, validates forwarded chunks, drops rows it
// already stored and stores the rest in the server's cache, plus the startup recovery that
// keeps a crash from turning into duplicates.
//
// It must never acknowledge a row before both the cache and the ledger made it durable, and
// never store a row whose (gateway, incarnation, dataset, partition, seq) the ledger already
// holds. It
// never serves /metrics and never opens or closes the cache or the ledger: the caller owns
// their lifecycle.
//
// # The chunk contract
//
// A sender declares with X-Hyp-Seq-Range: A-B that its chunk carries every row of its
// partition whose seq lies in [A, B], and A and B must be the seqs of the chunk's first and
// last rows (400 bad_seq_range otherwise). Once a chunk is stored the server records [A, B]
// in the ledger, not only the seqs it saw: sender seqs are cache-global, so one partition's
// seqs are sparse, and recording the range keeps the ledger at one interval per contiguous
// stream of chunks; it also lets a later re-send that is chunked differently, say [50, 150]
// after [1, 100], be recognised row by row. The ledger therefore never holds a seq outside
// the span of rows a chunk actually carried: a declared range no row bounds, such as
// 0-9223372036854775807 on a one-row chunk, is refused instead of silencing the gateway.
//
// Only a token allowed to send as a gateway can touch that gateway's ledger: a token bound
// to gateway globs in the token file gets 403 gateway_not_allowed for any other gateway.
//
// # Crash safety
//
// The cache append and the ledger update are two durable writes. A crash between them would
// leave rows stored but not remembered, and the sender's retry would store them again. Every
// stored row therefore carries its sender seq in the `_hyp_origin_seq` column (and its
// sender's incarnation, when not "", in `_hyp_origin_incarnation`; both internal columns,
// outside the cache's column cap, so never in `_hyp_overflow`), and the ledger keeps, per
// server cache partition, a checkpoint: the highest server seq it reflects. Recover, run at startup,
// reads only the rows above each checkpoint and records their origin seqs. The handler
// applies the same repair to one key, before serving it again, after a store or ledger
// failure left that key's state in doubt.
//
// # Concurrency
//
// Requests are serialised per server cache partition only (keyLocks: a gateway's partition,
// all its incarnations together, since they share the partition's ledger checkpoint), never
// server-wide, so chunks of different partitions (a forward sink ships several at once)
// reach the cache and the ledger together: the cache's log and the ledger each commit
// concurrent writes with one fsync, and every request is still answered only after its own
// rows and ledger record are durable.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/failpoint"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/promreg"
)

// Store is the server's own cache; *cache.Cache implements it.
//
// IngestPartitionRows takes rows framed rows in body, as parseRows frames them, and
// IngestPartitionRecords the rows of an Arrow body as record batches (chunk.freshRecords);
// neither may retain what it is given once it returns (a reused request buffer), each must
// be atomic and durable on return, and report bad input as *cache.InputError (nothing
// stored); any other error leaves it unknown whether the rows were stored. Flush must make
// every row they returned for visible to Scan and Status.
type Store interface {
	IngestPartitionRows(dataset, partitionName string, body []byte, rows int) (cache.Result, error)
	IngestPartitionRecords(dataset, partitionName string, recs []arrow.RecordBatch) (cache.Result, error)
	Flush(ctx context.Context) error
	Status() []cache.PartitionStatus
	Scan(ctx context.Context, dataset, partitionName string, since, until int64, fn func(arrow.RecordBatch) error) (cache.ScanStats, error)
}

// Options configure NewHandler.
type Options struct {
	// Tokens are the accepted bearer tokens and the gateways each may send as; at least one
	// is required.
	Tokens []Token
	// MaxBodyBytes bounds a request body, both as sent and after decompression. Must be > 0.
	MaxBodyBytes int64
	// RateLimit is the rows per second admitted across all gateways; 0 means no limit.
	RateLimit float64
	// Burst is the most rows admitted at once; 0 means one second's worth of RateLimit.
	Burst int
	// MaxGatewaysPerToken caps the distinct gateways a token without gateway globs may send
	// as (429 too_many_gateways beyond); 0 means no cap. KnownGateways, the gateways the
	// store already holds rows of, count against every such token (gatewayCap).
	MaxGatewaysPerToken int
	KnownGateways       []string
	// Registerer receives the hyp_server_* metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Logger receives storage failures and rejected chunks; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock of the rate limiter; nil means time.Now.
	Now func() time.Time
}

type handler struct {
	keeper  keeper
	form    rowForm // the form keeper stores rows in
	tokens  []token
	maxBody int64
	limit   *bucket // nil when there is no rate limit
	gwCap   *gatewayCap
	log     *slog.Logger
	metrics *metrics
	// incarnations feeds hyp_server_gateway_incarnations.
	incarnations *incarnationWatch
}

// NewHandler returns the handler of `hyp server`'s listener: POST /v1/ingest/{dataset} and
// GET /healthz. Call Recover before serving it.
func NewHandler(store Store, led *ledger.Ledger, o Options) (http.Handler, error) {
	if store == nil || led == nil {
		return nil, errors.New("server: nil store or ledger")
	}
	return newHandler(&localKeeper{store: store, led: led, afterAppend: failpoint.At(failAfterAppend)}, cacheRows, o)
}

func newHandler(k keeper, form rowForm, o Options) (http.Handler, error) {
	if o.MaxBodyBytes <= 0 {
		return nil, fmt.Errorf("server: MaxBodyBytes must be positive, got %d", o.MaxBodyBytes)
	}
	if o.RateLimit < 0 || o.Burst < 0 {
		return nil, fmt.Errorf("server: RateLimit and Burst must not be negative, got %g and %d", o.RateLimit, o.Burst)
	}
	tokens, err := hashTokens(o.Tokens)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	h := &handler{keeper: k, form: form, tokens: tokens, maxBody: o.MaxBodyBytes, log: o.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	if o.MaxGatewaysPerToken < 0 {
		return nil, fmt.Errorf("server: MaxGatewaysPerToken must not be negative, got %d", o.MaxGatewaysPerToken)
	}
	h.gwCap = newGatewayCap(o.MaxGatewaysPerToken, o.KnownGateways, h.log)
	if o.RateLimit > 0 {
		now := o.Now
		if now == nil {
			now = time.Now
		}
		h.limit = newBucket(o.RateLimit, o.Burst, now)
	}
	if h.metrics, err = newMetrics(o.Registerer); err != nil {
		return nil, err
	}
	h.incarnations = newIncarnationWatch(time.Now)
	if o.Registerer != nil {
		if err := promreg.Register(o.Registerer, h.incarnations); err != nil {
			return nil, fmt.Errorf("server: registering metrics: %w", err)
		}
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code := h.route(w, r)
	h.metrics.requests.WithLabelValues(strconv.Itoa(code)).Inc()
}

// route dispatches by hand rather than through http.ServeMux because ServeMux answers 404
// and 405 in plain text, and every error reply here must be JSON.
func (h *handler) route(w http.ResponseWriter, r *http.Request) int {
	if dataset, ok := strings.CutPrefix(r.URL.Path, "/v1/ingest/"); ok && !strings.Contains(dataset, "/") {
		return h.ingest(w, r, dataset)
	}
	if r.URL.Path == "/healthz" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return h.reject(w, methodNotAllowed(w, "GET, HEAD"))
		}
		return httpbody.WriteJSON(w, http.StatusOK, []byte("{\"status\":\"ok\"}\n"))
	}
	return h.reject(w, &httpbody.Error{Status: http.StatusNotFound, Kind: "not_found", Msg: "no such endpoint: " + r.URL.Path})
}

// ingest serves one forwarded chunk. The checks run in the order that lets each refuse a
// request as cheaply as possible without ever storing part of it: identity, size, load,
// then content.
func (h *handler) ingest(w http.ResponseWriter, r *http.Request, dataset string) int {
	if r.Method != http.MethodPost {
		return h.reject(w, methodNotAllowed(w, http.MethodPost))
	}
	tok := h.authorized(r.Header)
	if tok == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hyp"`)
		return h.reject(w, &httpbody.Error{Status: http.StatusUnauthorized, Kind: "unauthorized", Msg: "missing or unknown bearer token"})
	}
	// A missing or repeated gateway header is left to parseForward's 400: no gateway is
	// named that the token could be refused for.
	if gw, err := single(r.Header, headerGateway); err == nil && !tok.allows(gw) {
		h.log.Warn("server: refused a chunk sent as a gateway its token is not bound to", "gateway", fmt.Sprintf("%.128q", gw))
		return h.reject(w, &httpbody.Error{Status: http.StatusForbidden, Kind: "gateway_not_allowed",
			Msg: fmt.Sprintf("this token may not send as gateway %.128q (see the gateway globs of its line in the server's token file)", gw)})
	}
	if rerr := h.gwCap.admit(tok, r.Header); rerr != nil {
		return h.reject(w, rerr)
	}
	start := time.Now()
	buf, rerr := httpbody.Read(r, httpbody.Limits{Sent: h.maxBody, TooLarge: tooLarge})
	h.metrics.since("read", start)
	if rerr != nil {
		return h.reject(w, rerr)
	}
	defer httpbody.Release(buf)
	body := buf.Bytes()
	in, inErr := readRows(r.Header, body, h.maxBody)
	if h.limit != nil && inErr == nil {
		if wait := h.limit.take(in.rows()); wait > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(wait), 10))
			return h.reject(w, &httpbody.Error{Status: http.StatusTooManyRequests, Kind: "rate_limited", Msg: "the server is over its row rate limit; retry later"})
		}
	}
	fw, rerr := parseForward(r.Header)
	if rerr != nil {
		return h.poison(w, dataset, fw, rerr)
	}
	if ie := cache.CheckDataset(dataset); ie != nil {
		return h.poison(w, "", fw, &httpbody.Error{Status: http.StatusBadRequest, Kind: ie.Kind, Msg: ie.Msg})
	}
	if inErr != nil {
		if inErr.Status == http.StatusRequestEntityTooLarge {
			return h.reject(w, inErr)
		}
		return h.poison(w, dataset, fw, inErr)
	}
	// What parsing builds from the body is charged to the listener's budget before it is
	// built (SPEC 4): a body of short rows grows by the origin fields each row gains.
	meter := httpbody.MeterOf(r)
	if err := meter.Charge(in.cost(fw.incarnation)); err != nil {
		var he *httpbody.Error
		errors.As(err, &he)
		return h.reject(w, he)
	}
	start = time.Now()
	ch, rerr := in.parse(fw.first, fw.last, h.form, fw.incarnation, meter)
	h.metrics.since("parse", start)
	if rerr != nil {
		return h.poison(w, dataset, fw, rerr)
	}
	if _, ok := in.(arrowIn); ok {
		kept := "as_rows"
		if len(ch.recs) > 0 {
			kept = "as_sent"
		}
		h.metrics.arrow.WithLabelValues(kept).Inc()
	}
	defer ch.release()
	return h.commit(r.Context(), w, dataset, fw, ch)
}

// keeper stores the rows of a validated chunk that no earlier chunk stored, once per
// (gateway, incarnation, dataset, partition, seq), and records the chunk's span, all durable before it
// returns. A *httpbody.Error is poison the sender must quarantine; any other error is
// retryable and leaves nothing stored twice on the retry. The chunk is reused once keep
// returns, so keep must not retain it or any row of it.
type keeper interface {
	keep(ctx context.Context, dataset string, fw forward, ch *chunk) (kept, error)
}

// kept is what keep did with a chunk.
type kept struct {
	accepted int
	// seen is what the ledger knows of the sender's incarnation after the chunk.
	seen ledger.Sighting
}

// commit has the chunk kept and answers the sender.
func (h *handler) commit(ctx context.Context, w http.ResponseWriter, dataset string, fw forward, ch *chunk) int {
	start := time.Now()
	kp, err := h.keeper.keep(ctx, dataset, fw, ch)
	h.metrics.since("keep", start)
	accepted := kp.accepted
	var poison *httpbody.Error
	if errors.As(err, &poison) {
		return h.poison(w, dataset, fw, poison)
	}
	if err != nil {
		return h.unavailable(w, fw, err)
	}
	h.noteIncarnation(kp.seen)
	duplicates := len(ch.seqs) - accepted
	h.metrics.rows.WithLabelValues(dataset, "accepted").Add(float64(accepted))
	h.metrics.rows.WithLabelValues(dataset, "duplicate").Add(float64(duplicates))

	b := make([]byte, 0, 64)
	b = append(b, `{"accepted":`...)
	b = strconv.AppendInt(b, int64(accepted), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendInt(b, int64(duplicates), 10)
	b = append(b, "}\n"...)
	return httpbody.WriteJSON(w, http.StatusOK, b)
}

// failAfterAppend is the failpoint (package failpoint) between a chunk's rows becoming
// durable in the cache and its ledger Record: the instant whose crash only Recover's scan
// of the origin seqs keeps from turning the sender's retry into duplicates.
const failAfterAppend = "server-after-append"

// localKeeper is the single-node server's: its own cache and bbolt ledger.
type localKeeper struct {
	store Store
	led   *ledger.Ledger
	locks keyLocks
	// afterAppend, when set, runs once a chunk's rows are stored and before the ledger
	// records them (failAfterAppend).
	afterAppend func()
}

// keep stores the rows of ch the ledger does not hold and records ch's range, under the
// partition's lock so that two requests for one key cannot both find a seq missing and
// store it.
func (k *localKeeper) keep(ctx context.Context, dataset string, fw forward, ch *chunk) (kept, error) {
	key := ledger.Key{Gateway: fw.gateway, Incarnation: fw.incarnation, Dataset: dataset, Partition: partition.Name(fw.source)}
	name := partition.GatewayName(fw.gateway, fw.source)
	// Locked per server cache partition, every incarnation of the gateway together: they
	// share the partition's ledger checkpoint, and Recover reads only the rows above it, so one
	// incarnation's Record must not raise it over another's rows appended before and not yet
	// recorded (TestIncarnationsCrashBetweenAppendAndRecord).
	lk, err := k.locks.lock(ctx, ledger.Key{Gateway: key.Gateway, Dataset: key.Dataset, Partition: key.Partition})
	if err != nil {
		return kept{}, fmt.Errorf("waiting for the partition lock: %w", err)
	}
	defer k.locks.unlock(lk)
	if lk.dirty {
		if err := k.repair(ctx, key, name); err != nil {
			return kept{}, fmt.Errorf("repairing the ledger after an earlier failure: %w", err)
		}
		lk.dirty = false
	}
	held, err := k.led.Held(key, ch.seqs)
	if err != nil {
		return kept{}, err
	}
	var checkpoint int64 // 0 leaves the ledger's checkpoint where it is
	accepted := 0
	if slices.Contains(held, false) {
		var res cache.Result
		if len(ch.recs) > 0 {
			recs := ch.freshRecords(held, fw.incarnation)
			res, err = k.store.IngestPartitionRecords(dataset, name, recs)
			releaseRecords(recs)
		} else {
			fresh, n := ch.freshBody(held)
			res, err = k.store.IngestPartitionRows(dataset, name, fresh, n)
		}
		var ie *cache.InputError
		if errors.As(err, &ie) {
			return kept{}, &httpbody.Error{Status: http.StatusBadRequest, Kind: ie.Kind, Line: ie.Line, Msg: ie.Msg}
		}
		if err != nil {
			// The rows may be in the cache's log even though the append failed.
			lk.dirty = true
			return kept{}, fmt.Errorf("storing the rows of %s %d-%d: %w", name, ch.seqs[0], ch.seqs[len(ch.seqs)-1], err)
		}
		checkpoint, accepted = res.LastSeq, res.Accepted
		if k.afterAppend != nil {
			k.afterAppend()
		}
	}
	// parseRows made the declared range exactly the span of the rows.
	span := ledger.Interval{Start: ch.seqs[0], End: ch.seqs[len(ch.seqs)-1]}
	seen, err := k.led.RecordSeen(key, []ledger.Interval{span}, checkpoint, time.Now(), int64(accepted))
	if err != nil {
		lk.dirty = accepted > 0
		return kept{}, err
	}
	return kept{accepted: accepted, seen: seen}, nil
}

// repair brings one key's ledger up to date with what the cache holds for it, after a
// failure left unknown whether the last rows were stored.
func (k *localKeeper) repair(ctx context.Context, key ledger.Key, name string) error {
	if err := k.store.Flush(ctx); err != nil {
		return fmt.Errorf("flushing the cache: %w", err)
	}
	for _, st := range k.store.Status() {
		if st.Dataset == key.Dataset && st.Partition == name {
			return reconcile(ctx, k.store, k.led, key, name, st.HeadSeq)
		}
	}
	return nil // the cache holds nothing for the key, so the ledger lacks nothing
}

// poison rejects a chunk the sender must quarantine rather than retry. It is logged because
// it means a gateway's rows will not arrive.
func (h *handler) poison(w http.ResponseWriter, dataset string, fw forward, e *httpbody.Error) int {
	h.log.Warn("server: rejected a forwarded chunk", "dataset", dataset, "gateway", fw.gateway,
		"batch", fw.batchID, "error", e.Kind, "line", e.Line, "message", e.Msg)
	return h.reject(w, e)
}

// unavailable answers a storage or ledger failure with a retryable 503; the ledger keeps the
// retry from storing anything twice.
func (h *handler) unavailable(w http.ResponseWriter, fw forward, err error) int {
	h.log.Error("server: chunk not stored", "gateway", fw.gateway, "source", fw.source, "batch", fw.batchID, "err", err)
	w.Header().Set("Retry-After", "1")
	return h.reject(w, &httpbody.Error{Status: http.StatusServiceUnavailable, Kind: "unavailable", Msg: "the server could not store the chunk; retry"})
}

func (h *handler) reject(w http.ResponseWriter, e *httpbody.Error) int {
	h.metrics.rejected.WithLabelValues(e.Kind).Inc()
	return httpbody.WriteError(w, e)
}

// tooLarge is the reply to every oversized body; it is never modified.
var tooLarge = &httpbody.Error{Status: http.StatusRequestEntityTooLarge, Kind: "too_large",
	Msg: "the body exceeds the server's limit (after decompression, if compressed); send smaller chunks"}

func methodNotAllowed(w http.ResponseWriter, allow string) *httpbody.Error {
	w.Header().Set("Allow", allow)
	return &httpbody.Error{Status: http.StatusMethodNotAllowed, Kind: "method_not_allowed", Msg: "allowed methods: " + allow}
}
