// Package forward owns the sending side of the forward protocol (SPEC section 5): it turns
// one chunk of already-encoded rows into POST requests to a `hyp server`, reads the answer,
// and retries what may succeed later within a bounded inline wait. A central given as
// several replicas (SPEC 3, a `url` list) is one server to it: an attempt that fails in a
// way another replica may not (a transport error, a timeout, 429, 5xx) moves the next one
// to the next replica, while a refusal (401/403, 400/422, 413, 415) is the central's
// answer and ends Send wherever it came from, as does the 400 a TLS port gives an http://
// URL, which is the sink's configuration to fix, never the chunk's fault. A central that
// cannot read Arrow bodies (SPEC 5) is remembered, so the caller encodes its later chunks as
// NDJSON (Client.Format).
//
// It must never re-send a chunk the server answered 200 for, never have one chunk in
// flight to two replicas at once, never refresh or guess a credential, never decide chunk
// boundaries and never move a watermark: the caller owns chunking, watermarks and
// quarantine, and learns the outcome only from Send's Ack or error. It never shows a
// replica's URL but redacted (internal/redact): a password in its userinfo is sent, and
// stays out of every log line, error, state and metric label made here.
//
// Replicas must share one ledger (`hyp server` cluster mode): a chunk whose attempt timed
// out may have been stored, and the same batch sent to another replica is then a
// duplicate only that shared ledger recognises. Stand-alone servers listed as replicas
// would each store it.
package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/tlsconf"
)

var (
	// ErrRetryable means the server could not take the chunk within MaxWait (overload, 5xx,
	// network trouble). Nothing is lost: the caller keeps its watermark and sends the same
	// chunk again on a later tick, and the server's ledger dedupes whatever did arrive.
	ErrRetryable = errors.New("retryable")
	// ErrUnauthorized means the server refused the token (401/403). Retrying with the same
	// token cannot help, and this package never refreshes it.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrTooLarge means the server refused the chunk's size (413); the caller splits it.
	ErrTooLarge = errors.New("chunk too large")
	// ErrUnsupportedEncoding means the server does not accept the client's compression
	// (415), say an older server asked for zstd. The chunk itself is fine; retrying with the
	// same setting cannot help, so Send does not, and the sink's configuration must change.
	ErrUnsupportedEncoding = errors.New("compression not supported by the server")
	// ErrTLSRequired means an http:// URL reached a TLS port, whose server answered the
	// plain request with a 400 of its own, not hyp's. That 400 says nothing about the chunk,
	// so it must not quarantine it; the sink's url must change to https://.
	ErrTLSRequired = errors.New("the server speaks TLS: use an https:// url (and the sink's tls block)")
	// ErrArrowRefused means the server cannot read an Arrow body (a 415, or an older
	// server's bad_json). Nothing was stored; the client now reports NDJSON as its Format,
	// and the caller sends the same chunk again as NDJSON: same rows, same seq range, same
	// batch id, so the ledger keeps it exactly once whichever format arrived.
	ErrArrowRefused = errors.New("the server does not take Arrow bodies")
)

// Chunk is one unit to forward: rows of one partition, already encoded in Format in seq
// order, each carrying `_hyp_ingest_seq` and `_hyp_ingested_at`. FirstSeq and LastSeq must
// be the seqs of Body's first and last rows: they become X-Hyp-Seq-Range, which a server
// refuses (400, so the caller quarantines) when the rows do not run exactly from one to the
// other, and it records that span as delivered.
type Chunk struct {
	Dataset   string
	Partition string // `source=<value>`
	FirstSeq  int64
	LastSeq   int64
	Rows      int
	Format    Format // of Body
	Body      []byte
	// Wire, when set, is Body as Compress returned it: a caller that compresses ahead (the
	// forward sink does, while the unit before is in flight) spares Send doing it.
	Wire []byte
}

// Options configures a Client. Zero fields take the defaults named on each.
type Options struct {
	// URLs are the base URLs of one central's replicas (one for a single `hyp server`),
	// each http or https with no query, in the order failover visits them.
	URLs    []string
	Token   string // bearer token, as read from token_file
	Gateway string // stable id of this machine (X-Hyp-Gateway)
	// Incarnation is the id of the cache's seq space (X-Hyp-Incarnation, left out when "":
	// a cache made before incarnations, which a server knows as "").
	Incarnation string
	// Compression is applied to every body, in either format (Content-Encoding); the zero
	// value sends bodies as they are.
	Compression Compression
	// Format is the encoding the caller is asked to give chunks in (Client.Format); the
	// zero value is NDJSON.
	Format Format
	// HTTPClient defaults to a client with its own connection pool. Redirects are never
	// followed, whatever the client says: a 301/302/303 would turn the POST into a GET and
	// drop the body, and a redirect to another host would drop the token.
	HTTPClient *http.Client
	// TLS, when set, is used for every https replica (a forward sink's `tls` block): each
	// gets its own transport whose tls.Config is made for that replica's host, so the
	// central's certificate is checked against the name the URL gives (or TLS's
	// server_name). It cannot be combined with HTTPClient.
	TLS *tlsconf.Client
	// Ladder is the wait after each retryable failure that carries no usable Retry-After;
	// once exhausted its last step repeats. Default 250ms, 500ms, 1s, 2s, 5s, 10s, 30s.
	Ladder []time.Duration
	// MaxWait bounds the time one Send spends retrying (default 60s), so a down server
	// ends the caller's tick with ErrRetryable instead of holding it indefinitely. It also
	// caps any single Retry-After.
	MaxWait time.Duration
	// RequestTimeout bounds each attempt, answer included (default 30s), so a stalled
	// server costs one attempt, not a hung Send.
	RequestTimeout time.Duration
	// Cooldown is how long a replica whose attempt failed is passed over while another is
	// ready (default 5s); sticking to the replica that answers does the rest.
	Cooldown time.Duration
	Logger   *slog.Logger                                     // default: discard
	Now      func() time.Time                                 // default time.Now
	Sleep    func(ctx context.Context, d time.Duration) error // default: timer or ctx, whichever ends first
}

// Client sends chunks to one central. Its only mutable state besides pools is which
// replica is current and how each fared (under a lock), so one Client may serve
// concurrent Sends.
type Client struct {
	reps           *replicas
	token          string
	gateway        string
	incarnation    string
	comp           *compressor
	format         Format
	arrowRefused   atomic.Bool // the central answered an Arrow body as one it cannot read
	http           *http.Client
	clients        []*http.Client // per replica: http, or its own TLS transport
	ladder         []time.Duration
	maxWait        time.Duration
	requestTimeout time.Duration
	log            *slog.Logger
	now            func() time.Time
	sleep          func(context.Context, time.Duration) error
}

func defaultLadder() []time.Duration {
	return []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second,
		2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}
}

const (
	defaultMaxWait        = 60 * time.Second
	defaultRequestTimeout = 30 * time.Second
	defaultCooldown       = 5 * time.Second
)

// New checks o and fills in its defaults.
func New(o Options) (*Client, error) {
	reps, err := newReplicas(o.URLs)
	if err != nil {
		return nil, err
	}
	if err := partition.ValidateGateway(o.Gateway); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	if o.Token == "" {
		return nil, errors.New("forward: token is empty (check token_file)")
	}
	if strings.ContainsFunc(o.Token, unicode.IsControl) {
		// A trailing newline from the token file would otherwise surface only as a
		// confusing transport error on every send.
		return nil, errors.New("forward: token contains control characters (check token_file)")
	}
	c := &Client{
		reps:           reps,
		token:          o.Token,
		gateway:        o.Gateway,
		incarnation:    o.Incarnation,
		format:         o.Format,
		ladder:         defaultLadder(),
		maxWait:        defaultMaxWait,
		requestTimeout: defaultRequestTimeout,
		log:            o.Logger,
		now:            o.Now,
		sleep:          o.Sleep,
	}
	if len(o.Ladder) > 0 {
		if i := slices.IndexFunc(o.Ladder, func(d time.Duration) bool { return d <= 0 }); i >= 0 {
			return nil, fmt.Errorf("forward: ladder step %d is %s, want > 0", i, o.Ladder[i])
		}
		c.ladder = slices.Clone(o.Ladder)
	}
	if c.maxWait, err = positiveOr(o.MaxWait, defaultMaxWait, "max wait"); err != nil {
		return nil, err
	}
	if c.requestTimeout, err = positiveOr(o.RequestTimeout, defaultRequestTimeout, "request timeout"); err != nil {
		return nil, err
	}
	if reps.cooldown, err = positiveOr(o.Cooldown, defaultCooldown, "cooldown"); err != nil {
		return nil, err
	}
	if c.comp, err = newCompressor(o.Compression); err != nil {
		return nil, err
	}
	hc := http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	if o.HTTPClient != nil {
		if o.TLS != nil {
			return nil, errors.New("forward: TLS and HTTPClient are exclusive")
		}
		hc = *o.HTTPClient
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.http = &hc
	c.clients = make([]*http.Client, len(reps.rs))
	for i, rp := range reps.rs {
		c.clients[i] = c.http
		if u, _ := url.Parse(rp.endpoint); o.TLS != nil && u.Scheme == "https" {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = o.TLS.Config(u.Hostname())
			tc := hc
			tc.Transport = tr
			c.clients[i] = &tc
		}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	return c, nil
}

func positiveOr(d, def time.Duration, name string) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("forward: %s is %s, want >= 0 (0 means %s)", name, d, def)
	case d == 0:
		return def, nil
	}
	return d, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failure is a retryable outcome of one attempt.
type failure struct {
	err        error
	retryAfter string // the server's Retry-After header, if any
}

// Receipt is what delivering one chunk did.
type Receipt struct {
	Ack Ack
	// WireBytes is the size of the request body as sent, after compression: what the chunk
	// cost on the wire once (a retry sends the same bytes again).
	WireBytes int64
}

// Format is the encoding chunks should be given in: Options.Format, or NDJSON once the
// central refused an Arrow body (a 415 to an Arrow body is taken for the format's: if it
// was the compression's, the NDJSON body gets the same 415, reported as
// ErrUnsupportedEncoding).
func (c *Client) Format() Format {
	if c.arrowRefused.Load() {
		return NDJSON
	}
	return c.format
}

// Compress returns body in the form it travels in under the client's compression, for
// Chunk.Wire.
func (c *Client) Compress(body []byte) ([]byte, error) {
	wire, err := c.comp.compress(body)
	if err != nil {
		return nil, fmt.Errorf("compressing the body: %w", err)
	}
	return wire, nil
}

// Send delivers ch and returns the server's ack. On an error nothing may be assumed about
// the central's state except through the error's kind:
//   - ErrRetryable: not delivered within MaxWait; send the same chunk again later.
//   - ErrUnauthorized: the token is refused; nothing was retried.
//   - ErrUnsupportedEncoding: the server refuses the compression; nothing was retried.
//   - ErrTLSRequired: an http:// URL names a TLS port; nothing was retried.
//   - ErrArrowRefused: the server cannot read an Arrow chunk; send it again as NDJSON.
//   - ErrTooLarge: split the chunk and send the halves.
//   - *PoisonError (errors.As): the server refuses the content; quarantine the chunk.
//   - ctx.Err(): the caller gave up (shutdown).
//
// 429, 502, 503 and 504 are retried as SPEC 5 asks. 500 and every status SPEC 5 does not
// name (404, 3xx, ...) are retried too: they describe the server or its routing, which
// can recover, not the chunk, so they must never quarantine rows, and the server's seq
// ledger makes a re-send harmless. A 200 ends Send even when its body is unreadable: the
// status alone says the rows are durable.
//
// Every retried outcome also moves the next attempt to the next replica that is not
// cooling down or waiting out its Retry-After, at once: one replica's trouble costs no
// wait while another is ready. Only when none is does Send wait, for the earliest
// Retry-After or a ladder step, and go on round robin. The replica that answers stays
// current for later Sends. Attempts run one after another in this goroutine, never
// concurrently, so one chunk is never in flight to two replicas: a new attempt starts only
// once the previous one has failed, its request cancelled by its timeout if need be.
func (c *Client) Send(ctx context.Context, ch Chunk) (Receipt, error) {
	if err := ch.validate(); err != nil {
		return Receipt{}, fmt.Errorf("forward: %w", err)
	}
	id := BatchID(c.gateway, c.incarnation, ch.Dataset, ch.Partition, ch.FirstSeq, ch.LastSeq)
	what := fmt.Sprintf("forward %s %s seqs %d-%d (batch %s)", ch.Dataset, ch.Partition, ch.FirstSeq, ch.LastSeq, id)
	// Compressed once: every attempt sends the same bytes.
	wire := ch.Wire
	if wire == nil {
		var err error
		if wire, err = c.Compress(ch.Body); err != nil {
			return Receipt{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	start := c.now()
	step := 0
	r := c.reps.begin(start)
	for attempt := 1; ; attempt++ {
		ack, fail, err := c.attempt(ctx, r, ch, wire, id)
		if err != nil {
			if ctx.Err() != nil {
				return Receipt{}, fmt.Errorf("%s: %w", what, err)
			}
			c.reps.answered(r)
			return Receipt{}, fmt.Errorf("%s: %w", c.at(what, r), err)
		}
		if fail == nil {
			c.reps.answered(r)
			return Receipt{Ack: ack, WireBytes: int64(len(wire))}, nil
		}
		now := c.now()
		var retryAt time.Time
		if ra, ok := ParseRetryAfter(fail.retryAfter, now); ok {
			retryAt = now.Add(min(ra, c.maxWait))
		}
		next, until, ready := c.reps.failed(r, now, retryAt)
		var wait time.Duration
		switch {
		case ready:
		case until.After(now):
			wait = until.Sub(now)
		default:
			wait = c.ladder[min(step, len(c.ladder)-1)]
			step++
		}
		if len(c.reps.rs) > 1 {
			fail.err = fmt.Errorf("replica %s: %w", c.reps.rs[r].url, fail.err)
		}
		if spent := now.Sub(start); spent+wait > c.maxWait {
			return Receipt{}, fmt.Errorf("%s: %w: gave up after %d attempts in %s (next wait %s would pass max wait %s); last failure: %w",
				what, ErrRetryable, attempt, spent, wait, c.maxWait, fail.err)
		}
		c.log.Warn("forward: retrying", "dataset", ch.Dataset, "partition", ch.Partition, "batch", id,
			"attempt", attempt, "wait", wait, "next", c.reps.rs[next].url, "err", fail.err)
		if wait > 0 {
			if err := c.sleep(ctx, wait); err != nil {
				return Receipt{}, fmt.Errorf("%s: waiting to retry after %v: %w", what, fail.err, err)
			}
		} else if err := ctx.Err(); err != nil {
			return Receipt{}, fmt.Errorf("%s: not failing over after %v: %w", what, fail.err, err)
		}
		c.reps.move(r, next)
		r = next
	}
}

// at adds replica r to what when there is more than one to tell apart.
func (c *Client) at(what string, r int) string {
	if len(c.reps.rs) == 1 {
		return what
	}
	return what + ": replica " + c.reps.rs[r].url
}

func (ch Chunk) validate() error {
	switch {
	case ch.Dataset == "":
		return errors.New("chunk has no dataset")
	case ch.FirstSeq < 1 || ch.FirstSeq > ch.LastSeq:
		return fmt.Errorf("chunk seq range %d-%d is not a positive ascending range", ch.FirstSeq, ch.LastSeq)
	case ch.Rows < 1 || int64(ch.Rows-1) > ch.LastSeq-ch.FirstSeq:
		return fmt.Errorf("chunk of %d rows cannot fit seq range %d-%d", ch.Rows, ch.FirstSeq, ch.LastSeq)
	case len(ch.Body) == 0:
		return errors.New("chunk body is empty")
	}
	if _, ok := partition.SourceFromName(ch.Partition); !ok {
		return fmt.Errorf("chunk partition %q is not source=<value>", ch.Partition)
	}
	return nil
}

// attempt sends ch with wire as its body to replica r and returns once the request is over:
// the ack, or a retryable failure, or a final error (the central's refusal, or ctx's end).
func (c *Client) attempt(ctx context.Context, r int, ch Chunk, wire []byte, id string) (Ack, *failure, error) {
	actx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.reps.rs[r].endpoint+"/v1/ingest/"+url.PathEscape(ch.Dataset), bytes.NewReader(wire))
	if err != nil {
		return Ack{}, nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", ch.Format.ContentType())
	if enc := c.comp.encoding(); enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	req.Header.Set("X-Hyp-Gateway", c.gateway)
	if c.incarnation != "" {
		req.Header.Set("X-Hyp-Incarnation", c.incarnation)
	}
	req.Header.Set("X-Hyp-Partition", ch.Partition)
	req.Header.Set("X-Hyp-Batch-Id", id)
	req.Header.Set("X-Hyp-Seq-Range", strconv.FormatInt(ch.FirstSeq, 10)+"-"+strconv.FormatInt(ch.LastSeq, 10))

	resp, err := c.clients[r].Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return Ack{}, nil, fmt.Errorf("request cancelled: %w", ctx.Err())
		case actx.Err() != nil:
			return Ack{}, &failure{err: fmt.Errorf("no answer within request timeout %s: %w", c.requestTimeout, err)}, nil
		}
		return Ack{}, &failure{err: err}, nil
	}
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
		_ = resp.Body.Close() // a response body's Close has nothing to report once read
	}()

	if resp.StatusCode == http.StatusOK {
		return c.readAck(resp.Body, ch, id), nil, nil
	}
	se := &statusError{status: resp.Status, body: readSnippet(resp.Body)}
	if ch.Format == Arrow && refusesArrow(resp.StatusCode, se.body) {
		if !c.arrowRefused.Swap(true) {
			c.log.Warn("forward: the central does not take Arrow bodies; sending NDJSON from now on (upgrade it to get format arrow back)",
				"replica", c.reps.rs[r].url, "answer", se)
		}
		return Ack{}, nil, fmt.Errorf("%w: %w", ErrArrowRefused, se)
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return Ack{}, nil, fmt.Errorf("%w: %w; check the sink's token_file", ErrUnauthorized, se)
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		if resp.StatusCode == http.StatusBadRequest && req.URL.Scheme == "http" && plainHTTPToTLS(se.body) {
			return Ack{}, nil, fmt.Errorf("%w: %w", ErrTLSRequired, se)
		}
		return Ack{}, nil, &PoisonError{Status: resp.StatusCode, Body: se.body}
	case http.StatusRequestEntityTooLarge:
		return Ack{}, nil, fmt.Errorf("%w (%d bytes, %d rows): %w; split it", ErrTooLarge, len(ch.Body), ch.Rows, se)
	case http.StatusUnsupportedMediaType:
		return Ack{}, nil, fmt.Errorf("%w (%s): %w; set the sink's compression to one the server takes", ErrUnsupportedEncoding, c.comp.kind, se)
	}
	return Ack{}, &failure{err: se, retryAfter: resp.Header.Get("Retry-After")}, nil
}

// readAck decodes a 200 body. A body it cannot read or decode still acknowledges the
// chunk: the server only answers 200 once the rows are durable, and re-sending would only
// be deduped. The counts are then a guess (every row accepted), and the log says so.
func (c *Client) readAck(body io.Reader, ch Chunk, id string) Ack {
	b, err := io.ReadAll(io.LimitReader(body, maxAckBody))
	if err != nil {
		err = fmt.Errorf("reading ack: %w", err)
	} else {
		var ack Ack
		if ack, err = parseAck(b); err == nil {
			if ack.Accepted+ack.Duplicates != ch.Rows {
				c.log.Warn("forward: ack counts do not add up to the chunk's rows", "dataset", ch.Dataset,
					"partition", ch.Partition, "batch", id, "rows", ch.Rows, "accepted", ack.Accepted, "duplicates", ack.Duplicates)
			}
			return ack
		}
	}
	c.log.Warn("forward: malformed 200 body; counting every row as accepted", "dataset", ch.Dataset,
		"partition", ch.Partition, "batch", id, "rows", ch.Rows, "err", err, "body", readSnippet(bytes.NewReader(b)))
	return Ack{Accepted: ch.Rows}
}
