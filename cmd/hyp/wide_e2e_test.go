package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// firstRowFields is how many fields beyond `id` the first forwarded row carries: enough on its
// own to fill the server's 2,000-column cap (SPEC 4), so every column a later row needs,
// the server's own `_hyp_origin_seq` among them unless the cap leaves it out, would go to
// `_hyp_overflow`.
const firstRowFields = 2000

// wideChunk is forward chunk k of the test: rows per rows, seqs k*rows+1 to (k+1)*rows,
// each row's id its seq; the very first row also carries firstRowFields fields.
func wideChunk(t *testing.T, token string, k, rows int) (http.Header, []byte) {
	first, last := k*rows+1, (k+1)*rows
	h := chunkHeader(token, first, last)
	h.Set("Content-Type", "application/x-ndjson")
	var b bytes.Buffer
	for seq := first; seq <= last; seq++ {
		fmt.Fprintf(&b, `{"id":%d,`, seq)
		if seq == 1 {
			for i := range firstRowFields {
				fmt.Fprintf(&b, `"w%04d":%d,`, i, i)
			}
		}
		fmt.Fprintf(&b, `"msg":"row %d","_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-12-01T00:00:00Z"}`+"\n", seq, seq)
	}
	return h, b.Bytes()
}

// arrowChunk is chunk k as a sender's Arrow body (SPEC 5), without the wide first row: a
// server logs such a body's batches as they came, an Arrow record in its cache's log.
func arrowChunk(t *testing.T, token string, k, rows int) (http.Header, []byte) {
	first, last := k*rows+1, (k+1)*rows
	h := chunkHeader(token, first, last)
	h.Set("Content-Type", "application/vnd.apache.arrow.stream")
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil))
	defer b.Release()
	for seq := first; seq <= last; seq++ {
		b.Field(0).(*array.Int64Builder).Append(int64(seq))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_764_547_200_000_000))
		b.Field(2).(*array.Int64Builder).Append(int64(seq))
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("row %d", seq))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var body bytes.Buffer
	w := ipc.NewWriter(&body, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return h, body.Bytes()
}

// chunkHeader is the headers of a chunk of seqs first to last from the test's gateway.
func chunkHeader(token string, first, last int) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("X-Hyp-Gateway", "wide-gw")
	// With an incarnation the server keeps a second internal column, _hyp_origin_incarnation.
	h.Set("X-Hyp-Incarnation", "0123456789abcdef")
	h.Set("X-Hyp-Partition", "source=wide")
	h.Set("X-Hyp-Batch-Id", fmt.Sprintf("wide-%d-%d", first, last))
	h.Set("X-Hyp-Seq-Range", fmt.Sprintf("%d-%d", first, last))
	return h
}

// TestServerKillNineWideFirstRow holds `hyp server`'s exactly-once (SPEC 5, 9.1) to a
// dataset whose first forwarded row alone fills the column cap: the server is killed with
// SIGKILL at its failpoint between a chunk's cache append and its ledger record, the worst
// instant, again and again while the sender re-sends the chunk it got no answer for. Each
// row must be stored once, and its origin seq kept in a real column for the recovery that
// reads it. The same again with Arrow bodies, whose batches the server logs as they came.
// HYP_SERVER_KILLS sets the kills (5 by default; `make soak` runs 40).
func TestServerKillNineWideFirstRow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk func(t *testing.T, token string, k, rows int) (http.Header, []byte)
	}{{"ndjson, wide first row", wideChunk}, {"arrow", arrowChunk}} {
		t.Run(tc.name, func(t *testing.T) { serverKillNine(t, tc.chunk) })
	}
}

func serverKillNine(t *testing.T, chunk func(t *testing.T, token string, k, rows int) (http.Header, []byte)) {
	kills := 5
	if v := os.Getenv("HYP_SERVER_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("HYP_SERVER_KILLS=%q: want a positive integer", v)
		}
		kills = n
	}
	const rows = 50
	// Every server run is killed by its first or second fresh chunk, so this many chunks
	// always leaves some for runs after the last kill.
	chunks := 2*kills + 2
	rng := seededRand(t)
	home, listen, tokenFile := newServerHome(t)
	const token = "s3cr3t-gateway-token"
	url := "http://" + listen + "/v1/ingest/logs"
	client := &http.Client{Timeout: time.Minute}

	start := func(armed bool) *hypProc {
		var env []string
		if armed {
			env = append(env, fmt.Sprintf("HYP_FAILPOINT=server-after-append:%d", 1+rng.IntN(2)))
		}
		return startHyp(t, "server", env, listen, "server", "--home", home, "--listen", listen, "--token-file", tokenFile)
	}
	// send posts chunk k and returns the server's answer; ok is false when the request got
	// none (the server died on it).
	send := func(k int) (accepted, duplicates int, ok bool) {
		h, body := chunk(t, token, k, rows)
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, false
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chunk %d: %d %s", k, resp.StatusCode, reply)
		}
		var r struct{ Accepted, Duplicates int }
		if err := json.Unmarshal(reply, &r); err != nil {
			t.Fatalf("chunk %d: reply %q: %v", k, reply, err)
		}
		return r.Accepted, r.Duplicates, true
	}

	killed := 0
	srv := start(true)
	for k := 0; k < chunks; {
		if _, _, ok := send(k); ok {
			k++
			continue
		}
		ps := srv.waitExit(t, time.Minute)
		if ws, _ := ps.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("chunk %d got no answer and the server ended with %v, want SIGKILL at its failpoint:\n%s", k, ps, srv.out)
		}
		killed++
		srv = start(killed < kills)
		// A chunk the server answered before it died is all duplicates when sent again.
		if k > 0 {
			if acc, dup, ok := send(k - 1); !ok || acc != 0 || dup != rows {
				t.Fatalf("after kill %d, chunk %d re-sent: accepted %d, duplicates %d (answered: %v), want 0 and %d", killed, k-1, acc, dup, ok, rows)
			}
		}
	}
	srv.stop(t)
	if killed != kills {
		t.Fatalf("the server was killed %d times, want %d", killed, kills)
	}

	stored := map[int]int{}
	for _, id := range serverIDs(t, home, []string{"logs"})["logs"] {
		stored[id]++
	}
	var dups, lost int
	var bad []string
	for id := 1; id <= chunks*rows; id++ {
		switch n := stored[id]; {
		case n == 0:
			lost++
		case n > 1:
			dups += n - 1
		default:
			continue
		}
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf("id %d stored %d times", id, stored[id]))
		}
	}
	t.Logf("%d kills, %d rows sent, %d stored, %d duplicates, %d lost", killed, chunks*rows, len(stored)+dups, dups, lost)
	if dups > 0 || lost > 0 || len(stored) != chunks*rows {
		t.Fatalf("%d duplicates and %d lost of %d rows (%d distinct ids stored): %s", dups, lost, chunks*rows, len(stored), strings.Join(bad, "; "))
	}

	// The origin seq and incarnation have columns of their own, whatever the cap: the ones
	// Recover reads.
	r := runHyp(t, home, time.Minute, "query", "sql", "select count(distinct _hyp_origin_seq) as n, min(_hyp_origin_seq) as lo, max(_hyp_origin_seq) as hi, count(distinct _hyp_origin_incarnation) as incs from logs", "--internal", "--format", "json")
	if r.code != 0 {
		t.Fatalf("querying the server's origin seqs: %s", r)
	}
	var got []struct{ N, Lo, Hi, Incs float64 }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 ||
		got[0].N != float64(chunks*rows) || got[0].Lo != 1 || got[0].Hi != float64(chunks*rows) || got[0].Incs != 1 {
		t.Fatalf("origin seqs on the server: %s (%v), want %d distinct from 1 to %d, of one incarnation", r.stdout, err, chunks*rows, chunks*rows)
	}
}

// TestForwardedInternalFields holds `hyp server` to SPEC 5's forwarded internal fields
// from outside: a daemon's rows that its own cache overflowed reach a server whose dataset
// is full of another gateway's columns, and every field of every row is in the server's
// `_hyp_overflow`, the sender's own merged with the server's; an own overflow that is no
// object, and a row without exactly one ingest time, are refused. The daemon's ingest API
// refuses hyp's names in any case (SPEC 4).
func TestForwardedInternalFields(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	srv := startHypServer(t, srvHome, srvAddr, tokens)
	const token = "s3cr3t-gateway-token"
	const at = `"_hyp_ingested_at":"2026-01-02T03:04:05Z"`

	// Another gateway's first row fills the server dataset's columns.
	var filler strings.Builder
	filler.WriteString(`{"_hyp_ingest_seq":1,` + at)
	for i := range firstRowFields {
		fmt.Fprintf(&filler, `,"g%04d":%d`, i, i)
	}
	filler.WriteString("}\n")
	if code, kind := forge(t, srvAddr, token, "filler", "1-1", filler.String()); code != http.StatusOK {
		t.Fatalf("filler chunk: %d %s", code, kind)
	}

	home, addr := newHome(t)
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvAddr, tokens))
	startHypDaemon(t, home, addr)
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/ingest/logs?source=web", "application/x-ndjson", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m.Error
	}
	for _, row := range []string{`{"_hyp_overflow":{"a":1}}`, `{"_HYP_OVERFLOW":{"a":1}}`, `{"_hyp_overflow":"{}"}`, `{"_Hyp_Source":"x"}`, `{"ok":1,"_HYP_INGEST_SEQ":1}`} {
		if code, kind := post(`{"ok":1}` + "\n" + row + "\n"); code != http.StatusBadRequest || kind != "bad_field" {
			t.Errorf("daemon ingest of %s: %d %q, want 400 bad_field", row, code, kind)
		}
	}
	// The daemon's cache overflows f1998 and f1999 of the first row and "late" of the others.
	var b strings.Builder
	b.WriteString(`{"id":1`)
	for i := range firstRowFields {
		fmt.Fprintf(&b, `,"f%04d":%d`, i, i)
	}
	b.WriteString("}\n")
	for id := 2; id <= 4; id++ {
		fmt.Fprintf(&b, `{"id":%d,"late":"l%d"}`+"\n", id, id)
	}
	if code, kind := post(b.String()); code != http.StatusOK {
		t.Fatalf("daemon ingest: %d %s", code, kind)
	}
	requireRun(t, home, "central", 4)

	// Refused, whoever sends them.
	for _, tc := range []struct{ name, row, kind string }{
		{"own overflow a number", `{"_hyp_ingest_seq":1,` + at + `,"_hyp_overflow":5}`, "bad_field"},
		{"own overflow an array", `{"_hyp_ingest_seq":1,` + at + `,"_hyp_overflow":[{"a":1}]}`, "bad_field"},
		{"own overflow plain text", `{"_hyp_ingest_seq":1,` + at + `,"_hyp_overflow":"abc"}`, "bad_field"},
		{"own overflow two objects in a string", `{"_hyp_ingest_seq":1,` + at + `,"_hyp_overflow":"{\"a\":1}{\"b\":2}"}`, "bad_field"},
		{"own overflow in upper case", `{"_hyp_ingest_seq":1,` + at + `,"_HYP_OVERFLOW":{"a":1}}`, "bad_field"},
		{"no ingest time", `{"_hyp_ingest_seq":1,"a":1}`, "bad_ingested_at"},
		{"two ingest times", `{"_hyp_ingest_seq":1,` + at + `,` + at + `}`, "bad_ingested_at"},
	} {
		if code, kind := forge(t, srvAddr, token, "prober", "1-1", tc.row+"\n"); code != http.StatusBadRequest || kind != tc.kind {
			t.Errorf("%s: %d %q, want 400 %s", tc.name, code, kind, tc.kind)
		}
	}
	srv.stop(t)

	r := runHyp(t, srvHome, time.Minute, "query", "sql", "select _hyp_overflow as o from logs where _hyp_overflow like '%\"id\"%'", "--format", "json")
	if r.code != 0 {
		t.Fatalf("query server: %s", r)
	}
	var res []struct{ O string }
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("query output: %v\n%.500s", err, r.stdout)
	}
	got := map[int]map[string]json.RawMessage{}
	for _, row := range res {
		var ovf map[string]json.RawMessage
		if err := json.Unmarshal([]byte(row.O), &ovf); err != nil {
			t.Fatalf("_hyp_overflow %.300s: %v", row.O, err)
		}
		var id int
		_ = json.Unmarshal(ovf["id"], &id)
		got[id] = ovf
	}
	if len(got) != 4 || len(res) != 4 {
		t.Fatalf("%d rows of the daemon on the server (%d distinct ids), want 4", len(res), len(got))
	}
	if n := len(got[1]); n != 1+firstRowFields || string(got[1]["f0000"]) != "0" || string(got[1]["f1999"]) != "1999" {
		t.Errorf("the wide row's overflow has %d fields (f0000 %s, f1999 %s), want all %d", n, got[1]["f0000"], got[1]["f1999"], 1+firstRowFields)
	}
	for id := 2; id <= 4; id++ {
		if ovf := got[id]; len(ovf) != 2 || string(ovf["late"]) != fmt.Sprintf(`"l%d"`, id) {
			t.Errorf("row %d: overflow %v, want id and late", id, ovf)
		}
	}
}
