package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/control"
)

// ingestChunk bounds one request of `hyp ingest`: each chunk is atomic on its own.
const ingestChunk = 4 << 20

func ingestCmd(g *globals) *cobra.Command {
	var source string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ingest DATASET [FILE...]",
		Short: "Ingest NDJSON from files or stdin into the cache",
		Args:  args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			dir, err := g.resolve()
			if err != nil {
				return err
			}
			dataset := a[0]
			if ie := cache.CheckDataset(dataset); ie != nil {
				return usageError{ie}
			}
			var inputs []io.Reader
			var size int64
			for _, f := range a[1:] {
				fh, err := os.Open(f)
				if err != nil {
					return usagef("%v", err)
				}
				defer fh.Close()
				if st, err := fh.Stat(); err == nil {
					size += st.Size()
				}
				inputs = append(inputs, fh)
			}
			if len(inputs) == 0 {
				inputs = []io.Reader{os.Stdin}
			}
			var total cache.Result
			bar := newProgress(cmd.Context(), "ingest "+dataset, size)
			err = withAPI(cmd.Context(), dir, func(api control.API) error {
				r := bufio.NewReaderSize(io.MultiReader(inputs...), 1<<20)
				var buf bytes.Buffer
				send := func() error {
					if buf.Len() == 0 {
						return nil
					}
					res, err := api.Ingest(cmd.Context(), dataset, source, buf.Bytes())
					bar.add(buf.Len())
					buf.Reset()
					if err != nil {
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
				for {
					line, err := r.ReadBytes('\n')
					if len(line) > 0 {
						if len(line) > 0 && line[len(line)-1] != '\n' {
							line = append(line, '\n')
						}
						if buf.Len()+len(line) > ingestChunk {
							if err := send(); err != nil {
								return err
							}
						}
						buf.Write(line)
					}
					if err == io.EOF {
						break
					}
					if err != nil {
						return err
					}
				}
				return send()
			})
			bar.done()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, ingestOut{Accepted: total.Accepted, FirstSeq: total.FirstSeq, LastSeq: total.LastSeq})
			}
			fmt.Printf("accepted %d rows (seq %d..%d)\n", total.Accepted, total.FirstSeq, total.LastSeq)
			return nil
		},
	}
	cmd.Flags().StringVar(&source, "source", "", "partition source for every row (default: each row's \"source\" field, else unknown)")
	jsonFlag(cmd, &asJSON)
	return cmd
}
