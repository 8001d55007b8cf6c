package transform

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// seqs walks the input's _hyp_ingest_seq values, which ascend strictly, in order.
type seqs struct {
	cols []*array.Int64
	rec  int // cols[rec] holds the next value
	row  int
	pos  int   // the next value's position in the whole input
	kept []int // the positions seek found, in order
}

// seek moves to the first input seq >= v and reports whether it is v.
func (s *seqs) seek(v int64) bool {
	for ; s.rec < len(s.cols); s.rec, s.row = s.rec+1, 0 {
		c := s.cols[s.rec]
		for ; s.row < c.Len(); s.row, s.pos = s.row+1, s.pos+1 {
			switch in := c.Value(s.row); {
			case in == v:
				s.kept = append(s.kept, s.pos)
				return true
			case in > v:
				return false
			}
		}
	}
	return false
}

// checkOutput holds a result (DuckDB's, before normalize) to what a transform may return:
// column names that are neither empty, nor duplicated, nor carry a control character (no
// sink could name such a column) nor the internal prefix (in any letter case) beyond the
// internal columns themselves and, when the input has it, _hyp_overflow; _hyp_ingest_seq
// exactly once, int64, never null, strictly ascending, and every value an input row's (a
// merge walk of the two ascending lists: the output is a subsequence of the input); and
// _hyp_ingested_at exactly once, a timestamp, never null.
//
// in yields the input's seqs; inputNames says which column names the input has.
func checkOutput(sc *arrow.Schema, recs []arrow.RecordBatch, in *seqs, inputNames map[string]bool) error {
	seen := make(map[string]bool, sc.NumFields())
	seqIdx, atIdx := -1, -1
	for i, f := range sc.Fields() {
		name := f.Name
		switch {
		case name == "":
			return refuse("output column %d has an empty name", i+1)
		case !utf8.ValidString(name):
			return refuse("output column %q: its name is not valid UTF-8", name)
		case hasControl(name):
			return refuse("output column %q: its name has a control character", name)
		case seen[name]:
			return refuse("output column %q appears twice: give the columns distinct names", name)
		}
		seen[name] = true
		switch {
		case name == seqColumn:
			seqIdx = i
		case name == ingestedColumn:
			atIdx = i
		case name == overflowColumn && inputNames[overflowColumn]:
		case hasInternalPrefix(name):
			return refuse("output column %q: names starting with %s (in any letter case) are hyp's own", name, internalPrefix)
		}
	}
	if seqIdx < 0 {
		return keepMessage(seqColumn)
	}
	if atIdx < 0 {
		return keepMessage(ingestedColumn)
	}
	if t := sc.Field(seqIdx).Type; t.ID() != arrow.INT64 {
		return refuse("%s comes out as %s, not int64: it must pass through unchanged", seqColumn, t)
	}
	if t := sc.Field(atIdx).Type; t.ID() != arrow.TIMESTAMP {
		return refuse("%s comes out as %s, not a timestamp: it must pass through unchanged", ingestedColumn, t)
	}
	first, last := true, int64(0)
	for _, rec := range recs {
		if rec.Column(atIdx).NullN() > 0 {
			return refuse("%s is null in a row: it must pass through unchanged", ingestedColumn)
		}
		col, ok := rec.Column(seqIdx).(*array.Int64)
		if !ok {
			return fmt.Errorf("transform: %s column is %T", seqColumn, rec.Column(seqIdx))
		}
		if col.NullN() > 0 {
			return refuse("%s is null in a row: it must pass through unchanged", seqColumn)
		}
		for _, v := range col.Int64Values() {
			if !first && v <= last {
				return refuse("output rows are out of %s order or repeat one (%d after %d): a transform keeps each input row at most once, in order", seqColumn, v, last)
			}
			if !in.seek(v) {
				return refuse("output row with %s %d is none of the input's: a transform may not invent rows or change %s", seqColumn, v, seqColumn)
			}
			first, last = false, v
		}
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}
