package query

import (
	"bufio"
	"database/sql/driver"
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"github.com/mattn/go-runewidth"
)

// Output formats accepted in Options.Format.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
)

type resultColumn struct {
	name string
	info duckdb.TypeInfo
}

// rowWriter receives result rows one at a time; close writes whatever
// follows the last row and flushes.
type rowWriter interface {
	writeRow(vals []driver.Value) error
	close() error
}

type writerFunc func(w *bufio.Writer, cols []resultColumn) (rowWriter, error)

// writerFor checks format before any work is done and returns how to build
// its writer once the result columns are known.
func writerFor(format string) (writerFunc, error) {
	switch format {
	case FormatJSON:
		return func(w *bufio.Writer, cols []resultColumn) (rowWriter, error) {
			return &jsonWriter{w: w, cols: cols, keys: jsonKeys(cols), array: true}, nil
		}, nil
	case FormatJSONL:
		return func(w *bufio.Writer, cols []resultColumn) (rowWriter, error) {
			return &jsonWriter{w: w, cols: cols, keys: jsonKeys(cols)}, nil
		}, nil
	case FormatCSV:
		return newCSVWriter, nil
	case FormatTable:
		return func(w *bufio.Writer, cols []resultColumn) (rowWriter, error) {
			return &tableWriter{w: w, cols: cols}, nil
		}, nil
	}
	return nil, &UsageError{Msg: fmt.Sprintf("unknown output format %q (want %s, %s, %s or %s)", format, FormatTable, FormatJSON, FormatJSONL, FormatCSV)}
}

// jsonKeys makes result column names unique, as JSON object keys must be for
// most readers; SELECT * over a join easily repeats a name.
func jsonKeys(cols []resultColumn) []string {
	used := make(map[string]bool, len(cols))
	keys := make([]string, len(cols))
	for i, c := range cols {
		key := c.name
		for n := 1; used[key]; n++ {
			key = c.name + "_" + strconv.Itoa(n)
		}
		used[key] = true
		keys[i] = key
	}
	return keys
}

type jsonWriter struct {
	w     *bufio.Writer
	cols  []resultColumn
	keys  []string
	array bool // one JSON array rather than one object per line
	rows  int
	buf   []byte
}

func (j *jsonWriter) writeRow(vals []driver.Value) error {
	b := j.buf[:0]
	switch {
	case !j.array:
	case j.rows == 0:
		b = append(b, "[\n"...)
	default:
		b = append(b, ",\n"...)
	}
	b = append(b, '{')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, j.keys[i])
		b = append(b, ':')
		var err error
		if b, err = appendJSON(b, j.cols[i].info, v); err != nil {
			return err
		}
	}
	b = append(b, '}')
	if !j.array {
		b = append(b, '\n')
	}
	j.buf = b
	j.rows++
	_, err := j.w.Write(b)
	return err
}

func (j *jsonWriter) close() error {
	switch {
	case !j.array:
	case j.rows == 0:
		if _, err := j.w.WriteString("[]\n"); err != nil {
			return err
		}
	default:
		if _, err := j.w.WriteString("\n]\n"); err != nil {
			return err
		}
	}
	return j.w.Flush()
}

func newCSVWriter(w *bufio.Writer, cols []resultColumn) (rowWriter, error) {
	cw := csv.NewWriter(w)
	header := make([]string, len(cols))
	for i, c := range cols {
		header[i] = c.name
	}
	if err := cw.Write(header); err != nil {
		return nil, err
	}
	return &csvWriter{w: w, csv: cw, cols: cols, record: make([]string, len(cols))}, nil
}

type csvWriter struct {
	w      *bufio.Writer
	csv    *csv.Writer
	cols   []resultColumn
	record []string
}

func (c *csvWriter) writeRow(vals []driver.Value) error {
	for i, v := range vals {
		// NULL stays an empty field.
		s, _, err := textValue(c.cols[i].info, v)
		if err != nil {
			return err
		}
		c.record[i] = s
	}
	return c.csv.Write(c.record)
}

func (c *csvWriter) close() error {
	c.csv.Flush()
	if err := c.csv.Error(); err != nil {
		return err
	}
	return c.w.Flush()
}

// tableWriter keeps every cell until close, since column widths depend on
// all rows.
type tableWriter struct {
	w    *bufio.Writer
	cols []resultColumn
	rows [][]string
}

func (t *tableWriter) writeRow(vals []driver.Value) error {
	row := make([]string, len(vals))
	for i, v := range vals {
		s, null, err := textValue(t.cols[i].info, v)
		if err != nil {
			return err
		}
		if null {
			s = "NULL"
		}
		row[i] = escapeControl(s)
	}
	t.rows = append(t.rows, row)
	return nil
}

func (t *tableWriter) close() error {
	header := make([]string, len(t.cols))
	widths := make([]int, len(t.cols))
	rightAlign := make([]bool, len(t.cols))
	for i, c := range t.cols {
		header[i] = escapeControl(c.name)
		widths[i] = runewidth.StringWidth(header[i])
		rightAlign[i] = isNumeric(c.info)
	}
	for _, row := range t.rows {
		for i, s := range row {
			widths[i] = max(widths[i], runewidth.StringWidth(s))
		}
	}

	line := func(cells []string, align []bool) {
		for i, s := range cells {
			if i > 0 {
				t.w.WriteString(" | ")
			}
			pad := strings.Repeat(" ", widths[i]-runewidth.StringWidth(s))
			switch {
			case align != nil && align[i]:
				t.w.WriteString(pad + s)
			case i == len(cells)-1:
				t.w.WriteString(s)
			default:
				t.w.WriteString(s + pad)
			}
		}
		t.w.WriteByte('\n')
	}
	line(header, nil)
	dashes := make([]string, len(widths))
	for i, w := range widths {
		dashes[i] = strings.Repeat("-", w)
	}
	t.w.WriteString(strings.Join(dashes, "-+-") + "\n")
	for _, row := range t.rows {
		line(row, rightAlign)
	}
	if len(t.rows) == 1 {
		t.w.WriteString("(1 row)\n")
	} else {
		fmt.Fprintf(t.w, "(%d rows)\n", len(t.rows))
	}
	// bufio.Writer keeps the first write error and reports it here.
	return t.w.Flush()
}

func isNumeric(info duckdb.TypeInfo) bool {
	switch info.InternalType() {
	case duckdb.TYPE_TINYINT, duckdb.TYPE_SMALLINT, duckdb.TYPE_INTEGER, duckdb.TYPE_BIGINT,
		duckdb.TYPE_UTINYINT, duckdb.TYPE_USMALLINT, duckdb.TYPE_UINTEGER, duckdb.TYPE_UBIGINT,
		duckdb.TYPE_HUGEINT, duckdb.TYPE_UHUGEINT, duckdb.TYPE_BIGNUM,
		duckdb.TYPE_FLOAT, duckdb.TYPE_DOUBLE, duckdb.TYPE_DECIMAL:
		return true
	}
	return false
}

// escapeControl keeps every cell on one line so the table stays aligned.
func escapeControl(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var sb strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case isControl(r):
			fmt.Fprintf(&sb, `\x%02X`, r)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f
}
