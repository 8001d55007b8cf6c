package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/blob"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/forward"
	"github.com/hyp-project/hyp/internal/tlsconf"
	"github.com/hyp-project/hyp/internal/watermark"
)

// Unit budgets. A forward unit is one request, kept well under a server's default 16 MiB
// body limit; a blob unit is one file, large enough that object stores are not flooded
// with small files (its rows stream into the file as they are read, so its size is not
// held in memory).
//
// A forward sink keeps a few partitions' units in flight: one request at a time leaves
// both ends idle while the other works (encoding and compressing here, parsing and fsyncs
// there, which the server groups across concurrent requests). A few suffice to overlap
// them, and each holds a unit in memory. Within one partition, which ships one unit at a
// time, the next unit is read and encoded while the current one is in flight, so a single
// partition's backlog keeps both ends busy too; that holds a second unit in memory per
// partition. Blob units are large enough to keep a destination busy one at a time.
var (
	forwardLimits = limits{rows: 10_000, bytes: 4 << 20, inFlight: 4, readAhead: true}
	blobLimits    = limits{rows: 250_000, bytes: 256 << 20}
)

const (
	forwardRequestTimeout = 10 * time.Second
	forwardMaxWait        = 30 * time.Second
)

// newShipper builds the instance's destination and says how large its units may be.
func newShipper(ctx context.Context, x *instance, unitRows int64) (shipper, limits, error) {
	var s shipper
	var lim limits
	switch x.cfg.Type {
	case "forward":
		tok, err := os.ReadFile(x.cfg.TokenFile)
		if err != nil {
			return nil, limits{}, fmt.Errorf("token_file: %w", err)
		}
		token := strings.TrimSpace(string(tok))
		if token == "" {
			return nil, limits{}, fmt.Errorf("token_file %s is empty", x.cfg.TokenFile)
		}
		name := x.cfg.Compression
		if name == "" {
			name = config.DefaultCompression
		}
		comp, err := forward.ParseCompression(name)
		if err != nil {
			return nil, limits{}, err
		}
		fname := x.cfg.Format
		if fname == "" {
			fname = config.DefaultForwardFormat
		}
		format, err := forward.ParseFormat(fname)
		if err != nil {
			return nil, limits{}, err
		}
		var tc *tlsconf.Client
		if t := x.cfg.TLS; t != nil {
			fails, err := tlsconf.FailureCounter(x.metrics.reg, "sink/"+x.name)
			if err != nil {
				return nil, limits{}, err
			}
			tc, err = tlsconf.NewClient(tlsconf.ClientFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify},
				tlsconf.Options{Logger: x.log, Failures: fails})
			if err != nil {
				return nil, limits{}, fmt.Errorf("tls: %w", err)
			}
		}
		c, err := forward.New(forward.Options{
			URLs: x.cfg.URL, Token: token, Gateway: x.gateway, Incarnation: x.incarnation, Logger: x.log, Compression: comp, Format: format, TLS: tc,
			// A central that holds a request longer than this is treated as stalled; one
			// unit's retries end within forwardMaxWait, so a tick never hangs on a dead
			// central and the unit is retried on the next tick. A url list's replicas are
			// one central to the client: it fails over between them within that bound.
			RequestTimeout: forwardRequestTimeout, MaxWait: forwardMaxWait,
		})
		if err != nil {
			return nil, limits{}, err
		}
		s, lim = &forwardShipper{client: c}, forwardLimits
	case "blob":
		f, err := blob.ParseFormat(x.cfg.Format)
		if err != nil {
			return nil, limits{}, err
		}
		var dest blob.Destination
		switch d := x.cfg.Destination; d.Type {
		case "local-fs":
			l := blob.NewLocalFS(d.Path)
			// Temp files of units a crash interrupted; their units are re-encoded from intents.
			if err := l.Clean(); err != nil {
				return nil, limits{}, err
			}
			dest = l
		case "s3":
			dest, err = blob.NewS3(ctx, blob.S3Config{Bucket: d.Bucket, Prefix: d.Prefix, Region: d.Region, Endpoint: d.Endpoint, ForcePathStyle: d.ForcePathStyle}, x.dir().tmp())
			if err != nil {
				return nil, limits{}, err
			}
		default:
			return nil, limits{}, fmt.Errorf("destination type %q: want local-fs or s3", d.Type)
		}
		s, lim = &blobShipper{dest: dest, format: f}, blobLimits
	default:
		return nil, limits{}, fmt.Errorf("type %q: want blob or forward", x.cfg.Type)
	}
	if unitRows > 0 {
		lim.rows = unitRows
	}
	return s, lim, nil
}

type forwardShipper struct {
	client *forward.Client
	// bodies recycles units' bodies (NDJSON text, Arrow streams) once they are done with: a
	// unit body is megabytes, and allocating (and zeroing) each one afresh was a tenth of the
	// sender's CPU. Only bodies that never went on the wire themselves come back (a
	// compressed unit's): the HTTP transport may still read a request's body after Send has
	// returned.
	bodies sync.Pool
}

// maxPooledBody caps the bodies kept for reuse, so an occasional huge unit does not stay.
const maxPooledBody = 16 << 20

// forwardCollector exports, at scrape time, what each forward sink's client learnt of its
// central's replicas (SPEC 3 `url` lists): the failovers so far and, per replica its last
// attempt reached, whether that attempt got the central's answer.
type forwardCollector struct{ d *Driver }

var (
	failoversDesc = prometheus.NewDesc("hyp_forward_failovers_total", "Times a forward sink moved a unit's next attempt to another replica after a failed one.", []string{"sink"}, nil)
	replicaUpDesc = prometheus.NewDesc("hyp_forward_replica_up", "1 if the last attempt on the replica got an answer of the central (a 200 or a refusal), 0 if it failed; absent until a unit was sent to it.", []string{"sink", "url"}, nil)
)

func (fc forwardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- failoversDesc
	ch <- replicaUpDesc
}

func (fc forwardCollector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range fc.d.insts {
		f, ok := x.shipper().(*forwardShipper)
		if !ok {
			continue
		}
		st := f.client.State()
		ch <- prometheus.MustNewConstMetric(failoversDesc, prometheus.CounterValue, float64(st.Failovers), x.name)
		for _, r := range st.Replicas {
			if !r.Attempted {
				continue
			}
			up := 0.0
			if r.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(replicaUpDesc, prometheus.GaugeValue, up, x.name, r.URL)
		}
	}
}

// encode makes the forward shipper an encodingShipper: a unit's body is written as its
// rows are read, so the read-ahead of the next unit (limits.readAhead) encodes it too while
// this one is in flight. It is in the format the client asks for now: Arrow until the
// central refused it, then NDJSON.
func (f *forwardShipper) encode(schema *arrow.Schema) (unitEncoding, error) {
	if f.client.Format() == forward.Arrow {
		return newArrowBody(schema, f.client, &f.bodies), nil
	}
	b, err := newNDJSONBody(schema)
	if err != nil {
		return nil, err
	}
	if buf, ok := f.bodies.Get().(*[]byte); ok {
		b.body = *buf
	}
	return &forwardBody{b: b, f: f}, nil
}

// forwardBody is a forward unit's body under way.
type forwardBody struct {
	b *ndjsonBody
	f *forwardShipper
	// wire is the body compressed for the wire once sealed; nil until then, or when
	// compressing failed, in which case Send compresses again and reports the error.
	wire []byte
}

func (e *forwardBody) seal() { e.wire, _ = e.f.client.Compress(e.b.body) }

func (e *forwardBody) add(_ context.Context, rec arrow.RecordBatch) error {
	e.b.append(rec)
	return nil
}

func (e *forwardBody) discard() {
	recycleBody(&e.f.bodies, e.b.body, e.wire)
	e.b.body, e.wire = nil, nil
}

// recycleBody hands a done unit's body back to bodies, unless the body itself went on the
// wire: unsealed, Send may have sent it as it is, and sealed uncompressed, wire is body.
func recycleBody(bodies *sync.Pool, body, wire []byte) {
	if len(wire) > 0 && len(body) > 0 && &wire[0] != &body[0] && cap(body) <= maxPooledBody {
		buf := body[:0]
		bodies.Put(&buf)
	}
}

func (f *forwardShipper) ship(ctx context.Context, p Part, u watermark.Unit, rows *unitRows) (int64, error) {
	var body, wire []byte
	format := forward.NDJSON
	switch e := rows.enc.(type) {
	case *forwardBody:
		body, wire = e.b.body, e.wire
	case *arrowBody:
		if body, wire, format = e.body(), e.wire, forward.Arrow; e.err != nil {
			return 0, fmt.Errorf("encoding the unit as Arrow IPC: %w", e.err)
		}
	default:
		// Rows read without encoding (encode failed, and fails here again).
		var err error
		if body, err = encodeNDJSON(rows); err != nil {
			return 0, err
		}
	}
	// The declared range is the span of the rows read, not the unit's recorded bounds: a
	// unit re-read from its intent may have lost its first rows to a forced prune or a
	// damaged file since it was decided, and a `hyp server` refuses a range its first and
	// last rows do not bound. The server's ledger dedupes the rows themselves, so a unit
	// re-sent with a narrower span is still recognised row by row.
	// With a transform, that is the span of the rows it kept.
	ch := forward.Chunk{Dataset: p.Dataset, Partition: p.Partition, FirstSeq: rows.keptFirst, LastSeq: rows.keptLast, Rows: int(rows.kept), Format: format, Body: body, Wire: wire}
	rc, err := f.client.Send(ctx, ch)
	if errors.Is(err, forward.ErrArrowRefused) {
		// The same rows, range and batch id as NDJSON: the central stored nothing of the
		// Arrow body, and later units are encoded as NDJSON from the start (encode).
		if ch.Body, err = ndjsonOfArrow(body); err != nil {
			return 0, fmt.Errorf("re-encoding an Arrow unit as NDJSON: %w", err)
		}
		ch.Format, ch.Wire = forward.NDJSON, nil
		rc, err = f.client.Send(ctx, ch)
	}
	var poison *forward.PoisonError
	switch {
	case err == nil:
		return rc.WireBytes, nil
	case errors.As(err, &poison):
		return 0, &errPoison{status: poison.Status, err: err}
	case errors.Is(err, forward.ErrTooLarge):
		return 0, fmt.Errorf("%w: %v", errTooLarge, err)
	}
	return 0, &errDestination{err}
}

type blobShipper struct {
	dest   blob.Destination
	format blob.Format
}

func (b *blobShipper) ship(ctx context.Context, p Part, u watermark.Unit, rows *unitRows) (int64, error) {
	// A shaped unit's file is named after the rows it keeps, as its intent recorded them.
	first, last := u.First, u.Last
	if u.KeptLast > 0 {
		first, last = u.KeptFirst, u.KeptLast
	}
	obj := blob.Object{Key: blob.Key(p.Dataset, p.Partition, first, last, b.format, blob.Layout(u.KeyLayout)), UnitID: u.ID, Rows: rows.kept, FirstSeq: first, LastSeq: last}
	f, ok := rows.enc.(*blobFile)
	if !ok {
		// Rows read without encoding (a partition withheld when it was read, say).
		enc, err := b.encode(rows.schema)
		if err != nil {
			return 0, err
		}
		f = enc.(*blobFile)
		defer f.discard()
		for _, rec := range rows.recs {
			if err := f.add(ctx, rec); err != nil {
				return 0, err
			}
		}
	}
	size, err := f.finish()
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", obj.Key, err)
	}
	if err := b.dest.Put(ctx, obj, f.path); err != nil {
		err = fmt.Errorf("put %s to %s: %w", obj.Key, b.dest, err)
		if errors.Is(err, blob.ErrConflict) {
			return 0, err
		}
		return 0, &errDestination{err}
	}
	return size, nil
}

// blobEncodeQueue is how many records may wait for a unit's encoder: enough to keep the scan
// going while the encoder finishes a row group, few enough to keep a unit's memory small.
const blobEncodeQueue = 2

func (b *blobShipper) encode(schema *arrow.Schema) (unitEncoding, error) {
	tmp, err := blob.CreateTemp(b.dest)
	if err != nil {
		return nil, err
	}
	w, err := blob.NewWriter(tmp, b.format, schema)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	f := &blobFile{tmp: tmp, path: tmp.Name(), recs: make(chan arrow.RecordBatch, blobEncodeQueue), done: make(chan error, 1)}
	go f.run(w)
	return f, nil
}

// blobFile is a unit's temp file, encoded by its own goroutine from the records read.
type blobFile struct {
	tmp    *os.File
	path   string
	recs   chan arrow.RecordBatch
	done   chan error
	closed bool
	err    error // the encoder's result, once closed
}

func (f *blobFile) run(w *blob.Writer) {
	var err error
	for rec := range f.recs {
		if err == nil {
			err = w.Write(rec)
		}
		rec.Release() // after a failure the rest is drained, so add never blocks for good
	}
	if err == nil {
		err = w.Close()
	}
	f.done <- err
}

func (f *blobFile) add(ctx context.Context, rec arrow.RecordBatch) error {
	rec.Retain()
	select {
	case f.recs <- rec:
		return nil
	case <-ctx.Done():
		rec.Release()
		return ctx.Err()
	}
}

// finish waits for the encoder and closes the file, returning its size.
func (f *blobFile) finish() (int64, error) {
	if !f.closed {
		f.closed = true
		close(f.recs)
		f.err = <-f.done
		if err := f.tmp.Close(); err != nil && f.err == nil {
			f.err = err
		}
	}
	if f.err != nil {
		return 0, f.err
	}
	st, err := os.Stat(f.path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// discard removes the temp file unless Put renamed it into place.
func (f *blobFile) discard() {
	if f.path == "" {
		return
	}
	f.finish()
	os.Remove(f.path)
	f.path = ""
}
