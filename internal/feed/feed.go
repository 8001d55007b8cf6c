// Package feed sends a stream of NDJSON to a node as `hyp ingest` does: in requests of
// whole lines of at most Chunk bytes each, every one atomic on its own, and adds up what
// they were given. It owns the chunk boundaries and how a rejected line is named in the
// whole stream. It never parses a row (the node does) and never retries a chunk: a failed
// chunk ends the stream, the chunks before it stay ingested.
package feed

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/hyp-project/hyp/internal/cache"
)

// Chunk bounds one request. A single line longer than this goes alone.
const Chunk = 4 << 20

// Ingester takes one chunk (control.API does).
type Ingester interface {
	Ingest(ctx context.Context, dataset, source string, body []byte) (cache.Result, error)
}

// Send ingests r into dataset (with source for every row when not empty) in chunks of at
// most Chunk bytes. A last line without a newline gets one. sent, when not nil, is told the
// size of each chunk once it has been answered. The result spans every chunk: their rows
// added up, the first chunk's first seq, the largest last seq.
func Send(ctx context.Context, to Ingester, dataset, source string, r io.Reader, sent func(bytes int)) (cache.Result, error) {
	return send(ctx, to, dataset, source, r, sent, Chunk)
}

func send(ctx context.Context, to Ingester, dataset, source string, r io.Reader, sent func(int), limit int) (cache.Result, error) {
	var total cache.Result
	var buf bytes.Buffer
	flush := func() error {
		if buf.Len() == 0 {
			return nil
		}
		res, err := to.Ingest(ctx, dataset, source, buf.Bytes())
		if sent != nil {
			sent(buf.Len())
		}
		buf.Reset()
		if err != nil {
			// The node counts lines from the start of the chunk; say where the chunk starts.
			if ie, ok := err.(*cache.InputError); ok && ie.Line > 0 {
				return fmt.Errorf("%s (line %d of the chunk starting after row %d)", ie.Msg, ie.Line, total.Accepted)
			}
			return err
		}
		if total.FirstSeq == 0 {
			total.FirstSeq = res.FirstSeq
		}
		total.Accepted += res.Accepted
		total.LastSeq = max(total.LastSeq, res.LastSeq)
		return nil
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			if buf.Len()+len(line) > limit {
				if err := flush(); err != nil {
					return total, err
				}
			}
			buf.Write(line)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return total, fmt.Errorf("read the input: %w", err)
		}
	}
	return total, flush()
}
