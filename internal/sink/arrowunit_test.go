package sink

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/config"
	seqledger "github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/rowjson"
	"github.com/hyp-project/hyp/internal/server"
)

// central is an in-process `hyp server` that records the Content-Type of every request and
// can refuse Arrow bodies as an older server would.
type central struct {
	cache *cache.Cache
	srv   *httptest.Server
	mu    sync.Mutex
	types []string
}

func newCentral(t *testing.T, dir string, refuseArrow bool) *central {
	t.Helper()
	ct := &central{cache: openCache(t, filepath.Join(dir, "cache"), nil)}
	t.Cleanup(func() { ct.cache.Close(context.Background()) })
	led, err := seqledger.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	h, err := server.NewHandler(ct.cache, led, server.Options{Tokens: []server.Token{{Secret: "tok"}}, MaxBodyBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ct.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		typ := r.Header.Get("Content-Type")
		ct.mu.Lock()
		ct.types = append(ct.types, typ)
		ct.mu.Unlock()
		if refuseArrow && typ != "application/x-ndjson" {
			w.WriteHeader(http.StatusUnsupportedMediaType)
			fmt.Fprintln(w, `{"error":"unsupported_media_type"}`)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ct.srv.Close)
	return ct
}

// rows lists every row the central stored, by partition, as JSON without the two columns
// the central stamps itself (its own seq and ingest time), sorted.
func (ct *central) rows(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	if err := ct.cache.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, st := range ct.cache.Status() {
		_, err := ct.cache.Scan(ctx, st.Dataset, st.Partition, 0, math.MaxInt64, func(rec arrow.RecordBatch) error {
			keep := rec.Schema().FieldIndices(columns.SeqColumn)[0]
			at := rec.Schema().FieldIndices(columns.IngestedAtColumn)[0]
			var fields []arrow.Field
			var cols []arrow.Array
			for i, f := range rec.Schema().Fields() {
				if i != keep && i != at {
					fields, cols = append(fields, f), append(cols, rec.Column(i))
				}
			}
			sc := arrow.NewSchema(fields, nil)
			enc, err := rowjson.NewEncoder(sc)
			if err != nil {
				return err
			}
			user := array.NewRecordBatch(sc, cols, rec.NumRows())
			defer user.Release()
			for i := range int(rec.NumRows()) {
				out = append(out, st.Partition+" "+string(enc.AppendRow(nil, user, i)))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

func (ct *central) contentTypes() []string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return slices.Clone(ct.types)
}

// forwardRows ingests rows that use every column type the cache makes (type conflicts
// give sibling columns, nested objects JSON text, strings that need escaping) into two
// partitions of c.
func forwardRows(t *testing.T, c *cache.Cache) int {
	t.Helper()
	n := 0
	for _, src := range []string{"web", "db"} {
		var b strings.Builder
		for i := range 700 {
			fmt.Fprintf(&b, `{"i":%d,"msg":"row \"%d\"\n\t\u00e9\u2028","nested":{"a":[%d,null]},"f":%g,"ok":%t,"v":%s}`+"\n",
				i, i, i, float64(i)/3, i%2 == 0, []string{`1`, `"x"`, `true`, `null`, `2.5`}[i%5])
			n++
		}
		if _, err := c.Ingest(testDataset, src, []byte(b.String())); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

func runForward(t *testing.T, home string, c *cache.Cache, url, format string, log *slog.Logger) RunResult {
	t.Helper()
	ctx := context.Background()
	token := filepath.Join(home, "token")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := New(ctx, Options{Home: home, GatewayID: "gw-1", Incarnation: c.Incarnation(), Cache: c, Logger: log, UnitRows: 300,
		Sinks: map[string]config.Sink{"central": {Type: "forward", URL: config.URLs{url}, TokenFile: token, Schedule: "@every 1h", Format: format}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.RunNow(ctx, "central")
	if err != nil || len(res) != 1 || res[0].Status != "ok" {
		t.Fatalf("run: %v %+v", err, res)
	}
	return res[0]
}

// TestForwardFormatsStoreTheSameRows holds the two wire formats to one outcome: the same
// units forwarded as Arrow and as NDJSON leave the same rows in a central, and a unit
// forwarded again in the other format is all duplicates, since unit, range and batch id do
// not depend on the format.
func TestForwardFormatsStoreTheSameRows(t *testing.T) {
	dir := t.TempDir()
	c := openCache(t, filepath.Join(dir, "gw"), nil)
	defer c.Close(context.Background())
	n := forwardRows(t, c)

	viaArrow, viaNDJSON := newCentral(t, filepath.Join(dir, "a"), false), newCentral(t, filepath.Join(dir, "b"), false)
	if res := runForward(t, filepath.Join(dir, "home-a"), c, viaArrow.srv.URL, "arrow", nil); res.Rows != int64(n) {
		t.Fatalf("arrow run exported %d rows, want %d", res.Rows, n)
	}
	if res := runForward(t, filepath.Join(dir, "home-b"), c, viaNDJSON.srv.URL, "ndjson", nil); res.Rows != int64(n) {
		t.Fatalf("ndjson run exported %d rows, want %d", res.Rows, n)
	}
	for ct, want := range map[*central]string{viaArrow: "application/vnd.apache.arrow.stream", viaNDJSON: "application/x-ndjson"} {
		for _, typ := range ct.contentTypes() {
			if typ != want {
				t.Fatalf("a request went as %q, want %q", typ, want)
			}
		}
	}
	a, b := viaArrow.rows(t), viaNDJSON.rows(t)
	if len(a) != n || !slices.Equal(a, b) {
		t.Fatalf("arrow stored %d rows, ndjson %d; first difference:\n%s", len(a), len(b), firstDiff(a, b))
	}
	// The same units again, as NDJSON, to the central that had them as Arrow (a fresh
	// home of the same gateway and seq space: every unit again).
	runForward(t, filepath.Join(dir, "home-c"), c, viaArrow.srv.URL, "ndjson", nil)
	if again := viaArrow.rows(t); !slices.Equal(again, a) {
		t.Fatalf("re-forwarding as NDJSON changed the stored rows: %d, was %d", len(again), len(a))
	}
}

// TestForwardFallsBackToNDJSONOn415: a central that answers Arrow bodies with 415 gets
// every row once as NDJSON; the client asks once, remembers, and says so once.
func TestForwardFallsBackToNDJSONOn415(t *testing.T) {
	dir := t.TempDir()
	c := openCache(t, filepath.Join(dir, "gw"), nil)
	defer c.Close(context.Background())
	n := forwardRows(t, c)
	old := newCentral(t, filepath.Join(dir, "old"), true)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if res := runForward(t, filepath.Join(dir, "home"), c, old.srv.URL, "arrow", log); res.Rows != int64(n) {
		t.Fatalf("exported %d rows, want %d", res.Rows, n)
	}
	if got := len(old.rows(t)); got != n {
		t.Fatalf("the central stored %d rows, want %d", got, n)
	}
	types := old.contentTypes()
	arrowSent := 0
	for _, typ := range types {
		if typ != "application/x-ndjson" {
			arrowSent++
		}
	}
	// Several partitions ship at once, so each may have had an Arrow unit in flight when
	// the first refusal came; after that, none.
	if arrowSent == 0 || arrowSent > forwardLimits.inFlight*2 || types[len(types)-1] != "application/x-ndjson" {
		t.Fatalf("content types sent: %v", types)
	}
	if k := strings.Count(logs.String(), "does not take Arrow bodies"); k != 1 {
		t.Fatalf("the fallback was logged %d times, want once:\n%s", k, logs.String())
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + "\n" + b[i]
		}
	}
	return "(one is a prefix of the other)"
}
