package feed

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/cache"
)

// node answers each chunk with the next of its results (or, past them, with seqs that
// follow on) and keeps the chunks.
type node struct {
	chunks  []string
	results []cache.Result
	errs    []error // the error of the chunk at the same index, if any
	seq     int64
}

func (n *node) Ingest(_ context.Context, dataset, source string, body []byte) (cache.Result, error) {
	if dataset != "logs" || source != "web" {
		return cache.Result{}, errors.New("wrong dataset or source")
	}
	i := len(n.chunks)
	n.chunks = append(n.chunks, string(body))
	if i < len(n.errs) && n.errs[i] != nil {
		return cache.Result{}, n.errs[i]
	}
	if i < len(n.results) {
		return n.results[i], nil
	}
	rows := bytes.Count(body, []byte("\n"))
	r := cache.Result{Accepted: rows, FirstSeq: n.seq + 1, LastSeq: n.seq + int64(rows)}
	n.seq += int64(rows)
	return r, nil
}

func TestSendChunks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		limit  int
		chunks []string
	}{
		{"empty input sends nothing", "", 8, nil},
		{"lines that fit go in one chunk", "a\nb\n", 100, []string{"a\nb\n"}},
		{"a last line gets its newline", "a\nb", 100, []string{"a\nb\n"}},
		{"a chunk may fill the limit exactly", "aaa\nbbb\n", 8, []string{"aaa\nbbb\n"}},
		{"a line that would pass the limit starts the next chunk", "aaa\nbbb\nccc\n", 8, []string{"aaa\nbbb\n", "ccc\n"}},
		{"a line longer than the limit goes alone", "a\nlong line\nb\n", 4, []string{"a\n", "long line\n", "b\n"}},
		{"empty lines are kept for the node to judge", "\n\na\n", 100, []string{"\n\na\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{}
			var sent []int
			res, err := send(context.Background(), n, "logs", "web", strings.NewReader(tc.in), func(b int) { sent = append(sent, b) }, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(n.chunks, tc.chunks) {
				t.Errorf("chunks %q, want %q", n.chunks, tc.chunks)
			}
			var sizes []int
			for _, c := range tc.chunks {
				sizes = append(sizes, len(c))
			}
			if !slices.Equal(sent, sizes) {
				t.Errorf("progress told of %v bytes, want %v", sent, sizes)
			}
			lines := int64(strings.Count(strings.Join(tc.chunks, ""), "\n"))
			want := cache.Result{Accepted: int(lines), LastSeq: lines}
			if lines > 0 {
				want.FirstSeq = 1
			}
			if res != want {
				t.Errorf("result %+v, want %+v", res, want)
			}
		})
	}
}

// The result spans the chunks as the node answered them, whatever their order of seqs.
func TestSendAddsUpResults(t *testing.T) {
	n := &node{results: []cache.Result{{Accepted: 1, FirstSeq: 10, LastSeq: 11}, {Accepted: 1, FirstSeq: 5, LastSeq: 7}, {Accepted: 1, FirstSeq: 8, LastSeq: 9}}}
	res, err := send(context.Background(), n, "logs", "web", strings.NewReader("aaa\nbbb\nccc\n"), nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := (cache.Result{Accepted: 3, FirstSeq: 10, LastSeq: 11}); res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
}

func TestSendStopsAtARejectedChunk(t *testing.T) {
	down := errors.New("daemon went away")
	for _, tc := range []struct {
		name    string
		err     error
		wantMsg string
	}{
		{"a bad line is named in the stream", &cache.InputError{Kind: "bad_json", Line: 2, Msg: "unexpected end of JSON"}, "unexpected end of JSON (line 2 of the chunk starting after row 2)"},
		{"an error of the whole chunk passes as it is", &cache.InputError{Kind: "bad_dataset", Msg: "no such dataset"}, "bad_dataset: no such dataset"},
		{"any other error passes as it is", down, down.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{errs: []error{nil, tc.err}}
			_, err := send(context.Background(), n, "logs", "web", strings.NewReader("a\nb\nc\nd\ne\nf\n"), nil, 4)
			if err == nil || err.Error() != tc.wantMsg {
				t.Fatalf("error %v, want %q", err, tc.wantMsg)
			}
			if len(n.chunks) != 2 {
				t.Errorf("%d chunks sent, want none after the rejected second", len(n.chunks))
			}
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestSendReportsAReadError(t *testing.T) {
	broken := errors.New("disk gone")
	_, err := Send(context.Background(), &node{}, "logs", "web", failingReader{broken}, nil)
	if !errors.Is(err, broken) {
		t.Fatalf("error %v, want it to wrap %v", err, broken)
	}
}
