// Package ingest owns the HTTP surface of the daemon's ingest listener: NDJSON ingest
// (POST /v1/ingest/{dataset}), OTLP/HTTP (POST /v1/logs, /v1/traces, /v1/metrics), the
// Prometheus scrape endpoint (GET /metrics) and the health check (GET /healthz).
//
// It never stores anything itself and acknowledges only what the store made durable: a
// success reply is written after the store returned, never before. Every reply other than
// 200 is a JSON object with an "error" key naming the error kind, so clients can branch on
// it without parsing messages, except to a protobuf OTLP request, which gets the protobuf
// google.rpc.Status OTLP/HTTP requires, its message beginning with the same kind.
//
// The NDJSON path is the hot one, so the handler does no per-row work there: it reads the
// body into a pooled buffer and hands it to the store, which validates and partitions.
package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/otlp"
	"github.com/hyp-project/hyp/internal/rowform"
)

// Store makes ingest requests durable; *cache.Cache implements it. Both methods are atomic
// (all rows or none) and return only once the rows are durable. Input errors are reported
// as *cache.InputError; any other error is a storage failure.
//
// Neither may retain body or the groups' bodies after it returns: the handler reuses their
// memory for the next request.
type Store interface {
	Ingest(dataset, source string, body []byte) (cache.Result, error)
	IngestRowGroups(dataset string, groups []rowform.RowGroup) (cache.Result, error)
}

// Options configure NewHandler.
type Options struct {
	// MaxBodyBytes bounds a request body as sent. Must be > 0. A compressed body may
	// decompress to more, up to what Budget holds (its whole limit: what it decodes into
	// is charged there too), or to MaxBodyBytes when there is no Budget.
	MaxBodyBytes int64
	// Registerer receives the hyp_ingest_* metrics. Required: the handler never falls back
	// to the global registry, so two handlers in one process (tests) cannot collide there.
	Registerer prometheus.Registerer
	// Gatherer is served at GET /metrics; nil turns /metrics into a 404.
	Gatherer prometheus.Gatherer
	// Ready says why /healthz answers 503 (the error's text is its message), or nil for 200;
	// a nil Ready means always ready.
	Ready func() error
	// Logger receives storage failures; nil means slog.Default().
	Logger *slog.Logger
	// Budget is the body budget of the listener this handler's process serves (see
	// httpbody.Guard); its refusals are counted in hyp_ingest_unavailable_total
	// {reason="memory"}. nil leaves that series out.
	Budget *httpbody.Budget
}

// endpoint is the closed set of values of the endpoint metric label; requests that match
// no route share one value so garbage paths cannot grow the label set.
type endpoint uint8

const (
	epIngest endpoint = iota
	epOTLPLogs
	epOTLPTraces
	epOTLPMetrics
	epMetrics
	epHealthz
	epUnknown
	numEndpoints
)

var endpointNames = [numEndpoints]string{
	epIngest:      "ingest",
	epOTLPLogs:    "otlp_logs",
	epOTLPTraces:  "otlp_traces",
	epOTLPMetrics: "otlp_metrics",
	epMetrics:     "metrics",
	epHealthz:     "healthz",
	epUnknown:     "unknown",
}

// The success reply of every OTLP/HTTP signal is an Export*ServiceResponse holding only an
// empty partial_success, byte for byte as the collector's pdata encodes it (otlpresp_test.go
// compares them): in protobuf field 1 with length 0, in JSON an empty object. Written here
// rather than by pdata, which would link it and gRPC into the binary for these four bytes.
var (
	otlpOKProto = []byte{0x0a, 0x00}
	otlpOKJSON  = []byte(`{"partialSuccess":{}}`)
)

// otlpRoute is one OTLP/HTTP signal endpoint and its success reply in both encodings.
type otlpRoute struct {
	signal    otlp.Signal
	protoResp []byte
	jsonResp  []byte
}

type handler struct {
	store   Store
	limits  httpbody.Limits // shared by every request; never modified
	ready   func() error
	log     *slog.Logger
	scrape  http.Handler // nil when there is no Gatherer
	otlp    [numEndpoints]otlpRoute
	metrics *metrics
	// batches keeps decoded OTLP requests' row memory (*otlp.Batch) between requests.
	batches sync.Pool
}

// NewHandler returns the ingest listener's handler. It fails when an option is missing or
// the metrics cannot be registered (for example when Registerer already holds them).
func NewHandler(store Store, opts Options) (http.Handler, error) {
	if store == nil {
		return nil, errors.New("ingest: nil store")
	}
	if opts.MaxBodyBytes <= 0 {
		return nil, fmt.Errorf("ingest: MaxBodyBytes must be positive, got %d", opts.MaxBodyBytes)
	}
	if opts.Registerer == nil {
		return nil, errors.New("ingest: nil Registerer")
	}
	h := &handler{
		store: store,
		ready: opts.Ready,
		log:   opts.Logger,
		limits: httpbody.Limits{
			Sent: opts.MaxBodyBytes,
			TooLarge: &httpbody.Error{
				Status: http.StatusRequestEntityTooLarge, Kind: "body_too_large",
				Msg: fmt.Sprintf("the body exceeds %d bytes (ingest.max_body_bytes)", opts.MaxBodyBytes),
			},
		},
	}
	// The limit on a compressed body is a limit on what it costs the listener: a batch the
	// OpenTelemetry Collector gzips to a few MiB may hold tens of MiB of records, and is
	// taken whole when the listener's memory allows it (its rows are charged too), not
	// refused with a 413 the collector would drop it for.
	if opts.Budget != nil {
		h.limits.Decoded = opts.Budget.Limit()
		h.limits.DecodedTooLarge = httpbody.DecodedTooLarge(opts.Budget.Limit())
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if opts.Gatherer != nil {
		h.scrape = promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelError),
			// A broken collector should cost its own series, not the whole scrape.
			ErrorHandling: promhttp.ContinueOnError,
		})
	}
	for ep, sig := range map[endpoint]otlp.Signal{epOTLPLogs: otlp.Logs, epOTLPTraces: otlp.Traces, epOTLPMetrics: otlp.Metrics} {
		h.otlp[ep] = otlpRoute{signal: sig, protoResp: otlpOKProto, jsonResp: otlpOKJSON}
	}
	var err error
	if h.metrics, err = newMetrics(opts.Registerer, opts.Budget); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ep, code := h.route(w, r)
	h.metrics.requests.WithLabelValues(endpointNames[ep], strconv.Itoa(code)).Inc()
	h.metrics.duration[ep].Observe(time.Since(start).Seconds())
}

// route dispatches by hand rather than through http.ServeMux because ServeMux answers 404
// and 405 in plain text, and every error reply here must be JSON.
func (h *handler) route(w http.ResponseWriter, r *http.Request) (endpoint, int) {
	path := r.URL.Path
	if dataset, ok := strings.CutPrefix(path, "/v1/ingest/"); ok && !strings.Contains(dataset, "/") {
		return epIngest, h.ingest(w, r, dataset)
	}
	switch path {
	case "/v1/logs":
		return epOTLPLogs, h.otlpExport(w, r, epOTLPLogs)
	case "/v1/traces":
		return epOTLPTraces, h.otlpExport(w, r, epOTLPTraces)
	case "/v1/metrics":
		return epOTLPMetrics, h.otlpExport(w, r, epOTLPMetrics)
	case "/healthz":
		return epHealthz, h.healthz(w, r)
	case "/metrics":
		if h.scrape != nil {
			return epMetrics, h.serveMetrics(w, r)
		}
	}
	return epUnknown, httpbody.WriteError(w, &httpbody.Error{Status: http.StatusNotFound, Kind: "not_found", Msg: "no such endpoint: " + path})
}

// ingest serves POST /v1/ingest/{dataset}. An empty body (or one with only blank lines)
// still goes to the store, which validates the dataset and source, and is answered 200
// {"accepted":0} without first_seq/last_seq: zero rows have no seq range, and "0" would
// read as a real seq.
func (h *handler) ingest(w http.ResponseWriter, r *http.Request, dataset string) int {
	if r.Method != http.MethodPost {
		return h.reject(w, dataset, methodNotAllowed(w, http.MethodPost))
	}
	// The store checks the name too, but checking first avoids reading the body of a
	// request that is bound to fail.
	if ie := cache.CheckDataset(dataset); ie != nil {
		return h.reject(w, dataset, &httpbody.Error{Status: http.StatusBadRequest, Kind: ie.Kind, Msg: ie.Msg})
	}
	buf, rerr := httpbody.Read(r, h.limits)
	if rerr != nil {
		return h.reject(w, dataset, rerr)
	}
	res, err := h.store.Ingest(dataset, r.URL.Query().Get("source"), buf.Bytes())
	httpbody.Release(buf)
	if err != nil {
		return h.reject(w, dataset, h.storeError(dataset, err))
	}
	h.metrics.rows.WithLabelValues(dataset).Add(float64(res.Accepted))

	b := make([]byte, 0, 96)
	b = append(b, `{"accepted":`...)
	b = strconv.AppendInt(b, int64(res.Accepted), 10)
	if res.Accepted > 0 {
		// Seqs are strings because they are int64 and JSON numbers lose precision past
		// 2^53 in most clients.
		b = append(b, `,"first_seq":"`...)
		b = strconv.AppendInt(b, res.FirstSeq, 10)
		b = append(b, `","last_seq":"`...)
		b = strconv.AppendInt(b, res.LastSeq, 10)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // a client that hung up after its rows were stored has nothing to learn
	return http.StatusOK
}

// otlpExport serves one OTLP/HTTP signal endpoint. otlp.Decode is the single authority on
// which media types are accepted; the body is read before it can say so, which costs a
// misconfigured client one bounded read.
func (h *handler) otlpExport(w http.ResponseWriter, r *http.Request, ep endpoint) int {
	route := &h.otlp[ep]
	dataset := string(route.signal)
	if r.Method != http.MethodPost {
		return h.rejectOTLP(w, r, dataset, methodNotAllowed(w, http.MethodPost))
	}
	contentType := r.Header.Get("Content-Type")
	// A compressed protobuf body is kept as sent, so that one too large to take whole once
	// decompressed can be taken in pieces (pieces.go).
	mediaType, _, _ := mime.ParseMediaType(contentType)
	pieceable := mediaType == protobufType && h.limits.Decoded > 0
	var buf, sent *bytes.Buffer
	var rerr *httpbody.Error
	if pieceable {
		buf, sent, rerr = httpbody.ReadKeepingSent(r, h.limits)
	} else {
		buf, rerr = httpbody.Read(r, h.limits)
	}
	if sent != nil {
		defer httpbody.Release(sent)
	}
	if rerr != nil {
		if sent != nil && rerr.Kind == "decoded_too_large" {
			return h.otlpInPieces(w, r, route, sent.Bytes())
		}
		return h.rejectOTLP(w, r, dataset, rerr)
	}
	batch := h.batch()
	defer h.putBatch(batch)
	// The decoded model and the rows are charged to the listener's budget as they are
	// allocated: a small body can decode into rows many times its size (SPEC 4).
	err := batch.DecodeMetered(route.signal, contentType, buf.Bytes(), httpbody.MeterOf(r))
	// Decoded rows copy what they need, so the buffer can go back before the store call.
	httpbody.Release(buf)
	var refused *httpbody.Error
	if errors.As(err, &refused) {
		if sent != nil && refused.Kind == "decoded_too_large" {
			// The request keeps only the body as sent: its decompressed form and rows
			// are gone, and what they took goes back to the budget.
			*batch = otlp.Batch{} // its chunks would be charged again in full when reused
			httpbody.MeterOf(r).ReleaseAllBut(sent.Len())
			return h.otlpInPieces(w, r, route, sent.Bytes())
		}
		return h.rejectOTLP(w, r, dataset, refused)
	}
	if errors.Is(err, otlp.ErrUnsupportedMediaType) {
		return h.rejectOTLP(w, r, dataset, &httpbody.Error{Status: http.StatusUnsupportedMediaType, Kind: "unsupported_media_type", Msg: err.Error()})
	}
	if err != nil {
		return h.rejectOTLP(w, r, dataset, &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_otlp", Msg: err.Error()})
	}
	res, err := h.store.IngestRowGroups(dataset, batch.Groups)
	if err != nil {
		return h.rejectOTLP(w, r, dataset, h.storeError(dataset, err))
	}
	return h.otlpOK(w, route, contentType, res.Accepted)
}

// otlpInPieces takes a request too large to take whole in pieces (pieces.go) and answers it.
func (h *handler) otlpInPieces(w http.ResponseWriter, r *http.Request, route *otlpRoute, sent []byte) int {
	dataset := string(route.signal)
	h.metrics.pieced.Inc()
	accepted, rerr := h.otlpPieces(r, route.signal, sent)
	if rerr != nil {
		// What was stored before the failure is stored (pieces.go).
		h.metrics.rows.WithLabelValues(dataset).Add(float64(accepted))
		return h.rejectOTLP(w, r, dataset, rerr)
	}
	return h.otlpOK(w, route, r.Header.Get("Content-Type"), accepted)
}

// batch is a decoded-request Batch from the handler's pool; putBatch hands it back.
func (h *handler) batch() *otlp.Batch {
	if b, _ := h.batches.Get().(*otlp.Batch); b != nil {
		return b
	}
	return new(otlp.Batch)
}

func (h *handler) putBatch(b *otlp.Batch) {
	b.Reset()
	h.batches.Put(b)
}

// otlpOK answers a stored OTLP request, counting accepted rows.
func (h *handler) otlpOK(w http.ResponseWriter, route *otlpRoute, contentType string, accepted int) int {
	h.metrics.rows.WithLabelValues(string(route.signal)).Add(float64(accepted))

	// Decode accepted the content type, so it parses and is one of the two OTLP encodings;
	// the reply must use the same one.
	mediaType, _, _ := mime.ParseMediaType(contentType)
	resp := route.protoResp
	if mediaType == "application/json" {
		resp = route.jsonResp
	}
	w.Header().Set("Content-Type", mediaType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(resp)
	return http.StatusOK
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return httpbody.WriteError(w, methodNotAllowed(w, "GET, HEAD"))
	}
	if h.ready != nil {
		if err := h.ready(); err != nil {
			return httpbody.WriteError(w, &httpbody.Error{Status: http.StatusServiceUnavailable, Kind: "not_ready", Msg: err.Error()})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("{\"status\":\"ok\"}\n"))
	return http.StatusOK
}

func (h *handler) serveMetrics(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return httpbody.WriteError(w, methodNotAllowed(w, "GET, HEAD"))
	}
	sw := statusWriter{ResponseWriter: w, status: http.StatusOK}
	h.scrape.ServeHTTP(&sw, r)
	return sw.status
}

// statusWriter records the status promhttp writes, for the requests metric.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// storeError maps a store failure to a reply. Input errors are the client's; anything else
// is ours, so it is logged (with no body content, which may be sensitive).
func (h *handler) storeError(dataset string, err error) *httpbody.Error {
	var ie *cache.InputError
	if errors.As(err, &ie) {
		return &httpbody.Error{Status: http.StatusBadRequest, Kind: ie.Kind, Line: ie.Line, Msg: ie.Msg}
	}
	h.log.Error("ingest: store failed", "dataset", dataset, "err", err)
	switch {
	case errors.Is(err, cache.ErrDiskFull):
		h.metrics.unavailable.diskFull.Add(1)
		return &httpbody.Error{Status: http.StatusInsufficientStorage, Kind: "disk_full", Msg: err.Error(), RetryAfter: retryStore}
	case errors.Is(err, cache.ErrUnavailable):
		h.metrics.unavailable.ioError.Add(1)
		return &httpbody.Error{Status: http.StatusServiceUnavailable, Kind: "unavailable", Msg: err.Error(), RetryAfter: retryStore}
	}
	return &httpbody.Error{Status: http.StatusInternalServerError, Kind: "storage_error", Msg: err.Error()}
}

// retryStore is the Retry-After (seconds) of a request the store could not take: space
// comes back when retention or an operator frees it, not within a second.
const retryStore = 5

// reject counts a rejected ingest or OTLP request and writes its JSON reply.
func (h *handler) reject(w http.ResponseWriter, dataset string, e *httpbody.Error) int {
	h.countRejected(dataset, e.Kind)
	return httpbody.WriteError(w, e)
}

// countRejected counts a rejected request. A dataset name that is not valid is counted as
// "" so garbage names cannot grow the label set.
func (h *handler) countRejected(dataset, kind string) {
	if !cache.ValidDataset(dataset) {
		dataset = ""
	}
	h.metrics.rejected.WithLabelValues(dataset, kind).Inc()
}

// rejectOTLP is reject for an OTLP endpoint: a protobuf request is answered with a
// protobuf google.rpc.Status, as OTLP/HTTP requires and the collector's exporter parses;
// any other request with the JSON error every endpoint gives.
func (h *handler) rejectOTLP(w http.ResponseWriter, r *http.Request, dataset string, e *httpbody.Error) int {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != protobufType {
		return h.reject(w, dataset, e)
	}
	h.countRejected(dataset, e.Kind)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.Header().Set("Content-Type", protobufType)
	w.WriteHeader(e.Status)
	_, _ = w.Write(otlp.AppendStatus(nil, grpcCode(e.Status), e.Kind+": "+e.Msg))
	return e.Status
}

const protobufType = "application/x-protobuf"

// grpcCode is the gRPC status code OTLP/HTTP pairs with an HTTP status.
func grpcCode(status int) int32 {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return 3 // INVALID_ARGUMENT
	case http.StatusMethodNotAllowed:
		return 12 // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return 8 // RESOURCE_EXHAUSTED
	case http.StatusServiceUnavailable:
		return 14 // UNAVAILABLE
	}
	return 13 // INTERNAL
}

func methodNotAllowed(w http.ResponseWriter, allow string) *httpbody.Error {
	w.Header().Set("Allow", allow)
	return &httpbody.Error{Status: http.StatusMethodNotAllowed, Kind: "method_not_allowed", Msg: "allowed methods: " + allow}
}
