package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// FuzzIngestFlushQuery goes past the parser: whatever body ingest acknowledges must flush
// without setting anything aside, stay queryable with every row counted, and read back
// with every field of every row under its own name (or its type's sibling column, or in
// the overflow column).
func FuzzIngestFlushQuery(f *testing.F) {
	for _, s := range []string{
		`{"v":1e400}`, `{"v":-1e400,"w":1e-400}`, `{"n":` + strings.Repeat("9", 400) + `}`,
		`{"service.name":"api","http.status_code":503,"user-agent":"curl","@timestamp":"2026-01-01T00:00:00Z"}`,
		`{"ID":1,"id":2,"Id":"x"}`, `{"a.b":1,"a_x2Eb":2,"a_2eb":3}`, `{"x":1}` + "\n" + `{"x":"s"}` + "\n" + `{"x":true}`,
		`{"k":{"nested":[1,2,{"z":null}]},"e":"\u00e9\ud83d\ude00"}`, `{"dup":1,"dup":"two"}`, `{"_hyp_x":1}`,
	} {
		f.Add([]byte(s))
	}
	ctx := context.Background()
	c, err := cache.Open(ctx, f.TempDir(), cache.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close(ctx) })
	var total int64
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := c.Ingest("fz", "s", body)
		var ie *cache.InputError
		if errors.As(err, &ie) {
			return
		}
		if err != nil {
			t.Fatalf("ingest: %v", err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush after an acknowledged body %q: %v", body, err)
		}
		if lost, _ := c.Losses(); len(lost) > 0 {
			t.Fatalf("body %q: acknowledged rows set aside: %+v", body, lost)
		}
		if res.Accepted == 0 {
			return
		}
		total += int64(res.Accepted)
		v, err := c.View()
		if err != nil {
			t.Fatal(err)
		}
		defer v.Release()
		var out bytes.Buffer
		if err := Run(ctx, FromCache(v), "SELECT count(*) AS n FROM fz", Options{Format: FormatJSONL}, &out); err != nil {
			t.Fatalf("count after %q: %v", body, err)
		}
		var n struct{ N int64 }
		if err := json.Unmarshal(out.Bytes(), &n); err != nil || n.N != total {
			t.Fatalf("count %s, want %d (%v)", out.String(), total, err)
		}
		if err := Run(ctx, FromCache(v), "SELECT * FROM fz", Options{Format: FormatJSON}, io.Discard); err != nil {
			t.Fatalf("select * after %q: %v", body, err)
		}
		checkFields(t, c, body, res)
	})
}

// checkFields reads the acknowledged rows back and finds every non-null field of each.
func checkFields(t *testing.T, c *cache.Cache, body []byte, res cache.Result) {
	t.Helper()
	var got []map[string]any
	_, err := c.Scan(context.Background(), "fz", "source=s", res.FirstSeq-1, res.LastSeq, func(rec arrow.RecordBatch) error {
		enc, err := rowjson.NewEncoder(rec.Schema())
		if err != nil {
			return err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var m map[string]any
			if err := json.Unmarshal(enc.AppendRow(nil, rec, i), &m); err != nil {
				return err
			}
			got = append(got, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var sc jsonrow.Scanner
	i := 0
	_ = jsonrow.Lines(body, func(_ int, line []byte) error {
		if i >= len(got) {
			t.Fatalf("%d rows read back for %q", len(got), body)
		}
		row := got[i]
		i++
		var overflow map[string]any
		if s, ok := row[columns.OverflowColumn].(string); ok {
			_ = json.Unmarshal([]byte(s), &overflow)
		}
		return sc.Object(line, func(fd jsonrow.Field) error {
			if fd.Kind == jsonrow.Null {
				return nil
			}
			k := string(fd.Key)
			for _, name := range []string{k, k + "__string", k + "__long", k + "__double", k + "__boolean"} {
				if _, ok := row[name]; ok {
					return nil
				}
			}
			if _, ok := overflow[k]; !ok {
				t.Fatalf("field %q of %q is not read back: %v", k, line, row)
			}
			return nil
		})
	})
	if i != len(got) {
		t.Fatalf("%d rows read back, %d sent", len(got), i)
	}
}
