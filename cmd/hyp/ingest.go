package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/feed"
)

func ingestCmd(g *globals) *cobra.Command {
	var source string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ingest DATASET [FILE...]",
		Short: "Ingest NDJSON from files or stdin into the cache",
		Args:  args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
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
			bar := newProgress(cmd.Context(), "ingest "+dataset, size)
			total, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) (cache.Result, error) {
				return feed.Send(ctx, api, dataset, source, io.MultiReader(inputs...), bar.add)
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
