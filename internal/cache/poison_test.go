package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/rowjson"
)

func TestPhysicalNames(t *testing.T) {
	for _, tc := range []struct{ name, phys string }{
		{"level", "level"},
		{"user_agent", "user__agent"},
		{"service.name", "service_2ename"},
		{"http.status_code", "http_2estatus__code"},
		{"user-agent", "user_2dagent"},
		{"@timestamp", "_40timestamp"},
		{"ID", "_49_44"},
		{"a_x2Eb", "a__x2_45b"},
		{"9lives", "_39lives"},
		{"é", "_c3_a9"},
		{"_hyp_origin_seq", "_hyp_origin_seq"},
		{columns.OverflowColumn, columns.OverflowColumn},
	} {
		if got := physicalName(tc.name); got != tc.phys {
			t.Errorf("physicalName(%q) = %q, want %q", tc.name, got, tc.phys)
		}
		if got := logicalName(tc.phys); got != tc.name {
			t.Errorf("logicalName(%q) = %q, want %q", tc.phys, got, tc.name)
		}
	}
	// A stored name that is no escape (written by another tool) reads as it is.
	for _, s := range []string{"a_zz", "a_", "_4"} {
		if got := logicalName(s); got != s {
			t.Errorf("logicalName(%q) = %q", s, got)
		}
	}
}

// FuzzPhysicalName holds the escape to what the tables rely on: it round-trips, yields only
// [a-z0-9_] (unique even to a reader that ignores case), starts like an Avro name, and
// never looks internal.
func FuzzPhysicalName(f *testing.F) {
	for _, s := range []string{"a", "service.name", "ID", "id", "a_x2Eb", "_", "__", "9", "\u00e9\U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || !utf8.ValidString(name) || strings.HasPrefix(name, columns.InternalPrefix) {
			return
		}
		p := physicalName(name)
		if got := logicalName(p); got != name {
			t.Fatalf("logicalName(physicalName(%q)) = %q (via %q)", name, got, p)
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') || i == 0 && c >= '0' && c <= '9' {
				t.Fatalf("physicalName(%q) = %q has %q at %d", name, p, c, i)
			}
		}
		if strings.HasPrefix(p, columns.InternalPrefix) {
			t.Fatalf("physicalName(%q) = %q looks internal", name, p)
		}
	})
}

// scanJSON returns every row of a partition as a decoded JSON object, keyed as an export
// would key it.
func scanJSON(t *testing.T, c *Cache, ds, part string) []map[string]any {
	t.Helper()
	var out []map[string]any
	_, err := c.Scan(context.Background(), ds, part, 0, 1<<62, func(rec arrow.RecordBatch) error {
		enc, err := rowjson.NewEncoder(rec.Schema())
		if err != nil {
			return err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var m map[string]any
			d := json.NewDecoder(strings.NewReader(string(enc.AppendRow(nil, rec, i))))
			d.UseNumber()
			if err := d.Decode(&m); err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPoisonRowsAreStoredAndReadBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	big := strings.Repeat("9", 400)
	lines := []string{
		`{"service.name":"api","http.status_code":503,"user-agent":"curl","@timestamp":"2026-01-01T00:00:00Z"}`,
		`{"v":1e400,"w":-1e400,"big":` + big + `,"tiny":1e-400,"zero":0e10}`,
		`{"ID":1,"id":2,"Id":"three"}`,
		`{"a.b":1,"a_x2Eb":2,"a__x_32_45b":3}`,
		`{"n":1.5}`, `{"n":1e400}`, `{"k":7}`, `{"k":-1e400}`,
	}
	if _, err := c.Ingest("logs", "web", []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		t.Fatal(err)
	}
	check := func(c *Cache) {
		t.Helper()
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rows := scanJSON(t, c, "logs", "source=web")
		if len(rows) != len(lines) {
			t.Fatalf("%d rows, want %d", len(rows), len(lines))
		}
		want := []map[string]string{
			{"service.name": "api", "http.status_code": "503", "user-agent": "curl", "@timestamp": "2026-01-01T00:00:00Z"},
			{"v": "1e400", "w": "-1e400", "big": big, "tiny": "1e-400", "zero": "0.0"},
			{"ID": "1", "id": "2", "Id": "three"},
			{"a.b": "1", "a_x2Eb": "2", "a__x_32_45b": "3"},
			{"n": "1.5"}, {"n__string": "1e400"}, {"k": "7"}, {"k__string": "-1e400"},
		}
		for i, w := range want {
			for k, v := range w {
				if got := fmt.Sprint(rows[i][k]); got != v {
					t.Errorf("row %d %q = %q, want %q", i, k, got, v)
				}
			}
		}
	}
	check(c)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Restart: the stored names still read back as the field names, and the dataset's
	// column types are learned back.
	c = openTest(t, dir)
	defer c.Close(ctx)
	check(c)
	cols, _ := c.Columns("logs")
	got := map[string]ColType{}
	for _, col := range cols {
		got[col.Name] = col.Type
	}
	for name, typ := range map[string]ColType{"service.name": TypeString, "http.status_code": TypeLong, "v": TypeString, "big": TypeString, "n": TypeDouble, "n__string": TypeString, "ID": TypeLong, "Id": TypeString} {
		if got[name] != typ {
			t.Errorf("column %q: %v, want %v", name, got[name], typ)
		}
	}
	// Compaction keeps names and values.
	if _, err := c.Compact(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	check(c)
}

func TestFieldNamesWithControlCharactersAreRefused(t *testing.T) {
	c := openTest(t, t.TempDir())
	defer c.Close(context.Background())
	for _, line := range []string{`{"a\u0000b":1}`, `{"tab\there":1}`, `{"\u007f":1}`, `{"\u0085":1}`, `{"":1}`} {
		_, err := c.Ingest("logs", "web", []byte(`{"ok":1}`+"\n"+line+"\n"))
		ie, ok := err.(*InputError)
		if !ok || ie.Kind != "bad_field" || ie.Line != 2 {
			t.Errorf("%s: %v, want bad_field on line 2", line, err)
		}
	}
	if st := c.tables.partitions(); len(st) != 0 {
		t.Errorf("a refused request stored something: %d partitions", len(st))
	}
}

// TestReservedFieldNamesAreRefused holds the ingest API to SPEC 4: a row carrying a name
// of hyp's, in any letter case and however it is escaped, is bad_field and the request
// stores nothing; `_hyp_overflow` is one, whatever its value.
func TestReservedFieldNamesAreRefused(t *testing.T) {
	c := openTest(t, t.TempDir())
	defer c.Close(context.Background())
	for _, line := range []string{
		`{"_hyp_overflow":{"a":1}}`, `{"_hyp_overflow":"{\"a\":1}"}`, `{"_hyp_overflow":5}`,
		`{"_HYP_OVERFLOW":{"a":1}}`, `{"x":1,"_hyp_ingest_seq":1}`, `{"_HYP_INGEST_SEQ":1}`,
		`{"_Hyp_Source":"s"}`, `{"_hyp_origin_seq":1}`, `{"\u005fhyp_ingested_at":"2026-01-01T00:00:00Z"}`, `{"_hyp_":1}`,
	} {
		for _, source := range []string{"web", ""} { // a partition given up front, or found per row
			_, err := c.Ingest("logs", source, []byte(`{"ok":1}`+"\n"+line+"\n"))
			ie, ok := err.(*InputError)
			if !ok || ie.Kind != "bad_field" || ie.Line != 2 || !strings.Contains(ie.Msg, "reserved") {
				t.Errorf("%s (source %q): %v, want bad_field on line 2 naming the reserved prefix", line, source, err)
			}
		}
	}
	if st := c.tables.partitions(); len(st) != 0 {
		t.Errorf("a refused request stored something: %d partitions", len(st))
	}
	// Names that merely contain the prefix, or lack its last underscore, are user fields.
	if _, err := c.Ingest("logs", "web", []byte(`{"x_hyp_":1,"_hyp":2,"hyp_x":3}`+"\n")); err != nil {
		t.Errorf("user fields refused: %v", err)
	}
}

func TestColumnCapOverflows(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	const fields = 3000
	var b strings.Builder
	for i := range fields {
		fmt.Fprintf(&b, `{"f%04d":%d,"s":"x%d"}`+"\n", i, i, i)
	}
	if _, err := c.Ingest("logs", "web", []byte(b.String())); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cols, _ := c.Columns("logs")
	if len(cols) != MaxColumns {
		t.Errorf("%d columns, want %d", len(cols), MaxColumns)
	}
	rows := scanJSON(t, c, "logs", "source=web")
	if len(rows) != fields {
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		key := fmt.Sprintf("f%04d", i)
		if r["s"] != fmt.Sprintf("x%d", i) {
			t.Fatalf("row %d: s = %v", i, r["s"])
		}
		if v, ok := r[key]; ok {
			if fmt.Sprint(v) != fmt.Sprint(i) {
				t.Fatalf("row %d: %s = %v", i, key, v)
			}
			continue
		}
		var ovf map[string]any
		if err := json.Unmarshal([]byte(fmt.Sprint(r[columns.OverflowColumn])), &ovf); err != nil {
			t.Fatalf("row %d: %s %q: %v", i, columns.OverflowColumn, r[columns.OverflowColumn], err)
		}
		if fmt.Sprint(ovf[key]) != fmt.Sprint(i) {
			t.Fatalf("row %d: overflow %v lacks %s", i, ovf, key)
		}
	}
}

// TestInternalColumnsOutsideCap holds the column cap to user fields: a server's
// `_hyp_origin_seq` gets its own column when the dataset's first row alone fills the cap,
// and also when it first comes after a reopen, which learns the columns from the tables.
// A user field beyond the cap still goes to the overflow in both cases.
func TestInternalColumnsOutsideCap(t *testing.T) {
	const origin = columns.InternalPrefix + "origin_seq"
	wide := func(seq int, internal bool) string {
		var b strings.Builder
		fmt.Fprintf(&b, `{"id":%d`, seq)
		for i := range MaxColumns + 500 {
			fmt.Fprintf(&b, `,"f%04d":%d`, i, i)
		}
		if internal {
			fmt.Fprintf(&b, `,%q:%d`, origin, seq)
		}
		return b.String() + "}"
	}
	narrow := func(seq int) string { return fmt.Sprintf(`{"id":%d,"late":%d,%q:%d}`, seq, seq, origin, seq) }
	for _, tc := range []struct {
		name   string
		first  string // the dataset's first row, ingested before a reopen
		reopen bool
	}{
		{"in the first row", wide(1, true), false},
		{"first after a reopen", wide(1, false), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			const part = "gateway=g/source=s"
			c := openTest(t, dir)
			ingest := func(lines ...string) {
				t.Helper()
				body, n := framedOf(t, lines...)
				if _, err := c.IngestPartitionRows("logs", part, body, n); err != nil {
					t.Fatal(err)
				}
			}
			ingest(tc.first)
			if tc.reopen {
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
				c = openTest(t, dir)
			}
			defer c.Close(ctx)
			ingest(narrow(2), narrow(3))
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			cols, _ := c.Columns("logs")
			user := 0
			for _, col := range cols {
				if !columns.Internal(col.Name) {
					user++
				}
			}
			if user != MaxColumns || !slices.Contains(cols, Column{Name: origin, Type: TypeLong}) {
				t.Errorf("%d user columns (want %d); %s among the %d columns: %v", user, MaxColumns, origin, len(cols), slices.Contains(cols, Column{Name: origin, Type: TypeLong}))
			}
			rows := scanJSON(t, c, "logs", part)
			if len(rows) != 3 {
				t.Fatalf("%d rows, want 3", len(rows))
			}
			for i, r := range rows {
				seq := i + 1
				if seq == 1 && tc.reopen {
					continue // stored before the column existed, without an origin seq
				}
				if fmt.Sprint(r[origin]) != fmt.Sprint(seq) {
					t.Errorf("row %d: %s = %v, want %d in its column", seq, origin, r[origin], seq)
				}
				if ovf, _ := r[columns.OverflowColumn].(string); strings.Contains(ovf, origin) {
					t.Errorf("row %d: %s holds %s: %.200s", seq, columns.OverflowColumn, origin, ovf)
				}
				if seq > 1 && !strings.Contains(fmt.Sprint(r[columns.OverflowColumn]), fmt.Sprintf(`"late":%d`, seq)) {
					t.Errorf("row %d: %s = %.200v, want the field beyond the cap in it", seq, columns.OverflowColumn, r[columns.OverflowColumn])
				}
			}
		})
	}
}

// TestOwnOverflowNeverDropped holds the cache to keeping a row's own columns.OverflowColumn
// value whatever it is when the row overflows: a server refuses anything but an object
// (SPEC 5), yet its log may hold rows an older server took.
func TestOwnOverflowNeverDropped(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	var wide strings.Builder
	wide.WriteString(`{"id":1`)
	for i := range MaxColumns {
		fmt.Fprintf(&wide, `,"f%04d":%d`, i, i)
	}
	wide.WriteString("}")
	own := []string{`5`, `"abc"`, `"{\"a\":1} {\"b\":2}"`, `[1,{"a":2}]`, `true`}
	lines := []string{wide.String()}
	for i, v := range own {
		lines = append(lines, fmt.Sprintf(`{"id":%d,"late":%d,%q:%s}`, i+2, i+2, columns.OverflowColumn, v))
	}
	body, n := framedOf(t, lines...)
	if _, err := c.IngestPartitionRows("logs", "gateway=g/source=s", body, n); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows := scanJSON(t, c, "logs", "gateway=g/source=s")
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
	for i, v := range own {
		r := rows[i+1]
		var ovf map[string]json.RawMessage
		if err := json.Unmarshal([]byte(fmt.Sprint(r[columns.OverflowColumn])), &ovf); err != nil {
			t.Fatalf("own %s: %s %v: %v", v, columns.OverflowColumn, r[columns.OverflowColumn], err)
		}
		if string(ovf["late"]) != fmt.Sprint(i+2) || string(ovf[columns.OverflowColumn]) != v {
			t.Errorf("own %s: %s = %v, want late and the own value under %s", v, columns.OverflowColumn, r[columns.OverflowColumn], columns.OverflowColumn)
		}
	}
}

// TestUnstorableRowIsSetAside writes a line the ingest validation would have refused
// straight into the log (what damage after validation looks like): the flush stores the
// rows around it, keeps the line with its seq as a loss, and a restart replays nothing
// twice. Both forms of the log are tried: NDJSON lines and row-form rows.
func TestUnstorableRowIsSetAside(t *testing.T) {
	field := func(k, v string) []byte {
		return rowform.AppendField(nil, jsonrow.Field{Key: []byte(k), Kind: kindOf(v), Raw: []byte(v)})
	}
	for _, tc := range []struct {
		name string
		form byte
		body []byte
		kept string
	}{
		{name: "ndjson", form: formNDJSON, body: []byte(`{"i":1}` + "\n" + `{"i":` + "\n" + `{"i":3}` + "\n"), kept: `{"i":` + "\n"},
		{name: "rows", form: formRows, body: rowform.AppendRow(rowform.AppendRow(rowform.AppendRow(nil, field("i", "1")), []byte{0x7f}), field("i", "3")), kept: "\x7f\n"},
	} {
		t.Run(tc.name, func(t *testing.T) { testUnstorableRow(t, tc.form, tc.body, tc.kept) })
	}
}

func kindOf(v string) jsonrow.Kind {
	if v[0] == '"' {
		return jsonrow.String
	}
	return jsonrow.Number
}

func testUnstorableRow(t *testing.T, form byte, body []byte, wantKept string) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	gb := &groupBuilder{name: "source=web", rows: 3, body: body}
	res, err := c.append("logs", form, []*groupBuilder{gb})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows := scanJSON(t, c, "logs", "source=web")
	if len(rows) != 2 || fmt.Sprint(rows[0]["i"]) != "1" || fmt.Sprint(rows[1]["i"]) != "3" {
		t.Fatalf("rows %v", rows)
	}
	lost, err := c.Losses()
	if err != nil {
		t.Fatal(err)
	}
	bad := res.FirstSeq + 1
	if len(lost) != 1 || lost[0].FromSeq != bad || lost[0].ToSeq != bad || lost[0].Rows != 1 || lost[0].Partition != "source=web" {
		t.Fatalf("losses %+v, want seq %d", lost, bad)
	}
	kept, err := os.ReadFile(lost[0].KeptAt)
	if err != nil || string(kept) != wantKept {
		t.Fatalf("kept %q, %v", kept, err)
	}
	if !strings.HasPrefix(lost[0].KeptAt, layout(dir).lost()) {
		t.Errorf("kept at %s, outside the cache", lost[0].KeptAt)
	}
	if c.LostRows() != 1 {
		t.Errorf("LostRows %d", c.LostRows())
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c = openTest(t, dir)
	defer c.Close(ctx)
	if lost, _ := c.Losses(); len(lost) != 1 || c.LostRows() != 1 {
		t.Errorf("after restart: %+v, %d", lost, c.LostRows())
	}
	if rows := scanJSON(t, c, "logs", "source=web"); len(rows) != 2 {
		t.Errorf("after restart %d rows", len(rows))
	}
}

// TestSchemaVersionsStayBounded: a table that gains a column at every commit keeps at most
// two schemas in its metadata (the current one and the current snapshot's), so adding a
// column costs O(columns), and every value still reads back after the old schemas are gone.
func TestSchemaVersionsStayBounded(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	const n = 40
	for i := range n {
		if _, err := c.Ingest("logs", "web", []byte(fmt.Sprintf(`{"f%02d":%d}`+"\n", i, i))); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		p := c.tables.lookup("logs", "source=web")
		if got := len(p.gen.tbl.Metadata().Schemas()); got > 2 {
			t.Fatalf("after %d commits the table keeps %d schemas", i+1, got)
		}
	}
	rows := scanJSON(t, c, "logs", "source=web")
	if len(rows) != n {
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		if k := fmt.Sprintf("f%02d", i); fmt.Sprint(r[k]) != fmt.Sprint(i) {
			t.Errorf("row %d: %s = %v", i, k, r[k])
		}
	}
	if _, err := c.Compact(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	if rows := scanJSON(t, c, "logs", "source=web"); len(rows) != n || fmt.Sprint(rows[n-1][fmt.Sprintf("f%02d", n-1)]) != fmt.Sprint(n-1) {
		t.Errorf("after compaction: %v", rows[len(rows)-1])
	}
}
