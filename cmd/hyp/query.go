package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/query"
	"github.com/hyp-project/hyp/internal/sink"
)

func queryCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "query", Short: "Query the cache"}
	cmd.AddCommand(querySQLCmd(g), querySchemaCmd(g))
	return cmd
}

func querySQLCmd(g *globals) *cobra.Command {
	var opts query.Options
	var sinkName string
	cmd := &cobra.Command{
		Use:   "sql \"SELECT ...\"",
		Short: "Read-only SQL over the cache; each dataset is a table",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			dir, err := g.resolve()
			if err != nil {
				return err
			}
			switch opts.Format {
			case "", query.FormatTable, query.FormatJSON, query.FormatJSONL, query.FormatCSV:
			default:
				return usagef("--format must be table, json, jsonl or csv, not %q", opts.Format)
			}
			var tables []query.Table
			if sinkName != "" {
				t, done, err := lakeTables(cmd.Context(), dir, sinkName)
				if err != nil {
					return err
				}
				defer done()
				tables = t
			} else {
				v, err := view(cmd.Context(), dir)
				if err != nil {
					return err
				}
				defer v.Release()
				tables = query.FromCache(v)
			}
			out := bufio.NewWriterSize(os.Stdout, 1<<16)
			defer out.Flush()
			if err := query.Run(cmd.Context(), tables, a[0], opts, out); err != nil {
				var ue *query.UsageError
				if errors.As(err, &ue) {
					return usageError{err}
				}
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "table", "table, json, jsonl or csv")
	cmd.Flags().BoolVar(&opts.Internal, "internal", false, "expose _hyp_ingest_seq, _hyp_ingested_at and _hyp_partition")
	cmd.Flags().StringVar(&sinkName, "sink", "", "run the SQL over this iceberg sink's tables instead of the cache")
	return cmd
}

func querySchemaCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "schema DATASET",
		Short: "Columns and types of a dataset",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			dir, err := g.resolve()
			if err != nil {
				return err
			}
			r, err := openReader(cmd.Context(), dir)
			if err != nil {
				return err
			}
			cols, ok := r.Columns(a[0])
			if !ok {
				return fmt.Errorf("no dataset %q in the cache", a[0])
			}
			all := append([]cache.Column{{Name: columns.SeqColumn, Type: cache.TypeLong}, {Name: columns.IngestedAtColumn, Type: cache.TypeTimestamp}}, cols...)
			qcols := make([]query.Column, len(all))
			for i, c := range all {
				qcols[i] = query.Column{Name: c.Name, Type: c.Type.String()}
			}
			qnames := query.Names(qcols)
			if asJSON {
				return printJSON(os.Stdout, newSchemaOut(a[0], qcols, qnames))
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "COLUMN\tTYPE\tQUERIED AS")
			for i, c := range all {
				as := ""
				if qnames[i] != c.Name {
					as = qnames[i]
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Type, as)
			}
			return tw.Flush()
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

// lakeTables describes an iceberg sink's tables for a query; done removes the copies of
// files an S3 warehouse needed.
func lakeTables(ctx context.Context, dir, instance string) ([]query.Table, func(), error) {
	cfg, err := loadConfig(dir, "")
	if err != nil {
		return nil, nil, err
	}
	t, done, err := sink.QueryTables(ctx, cfg, instance)
	if errors.Is(err, sink.ErrUnknownSink) || errors.Is(err, sink.ErrNotIceberg) {
		return nil, nil, usageError{err}
	}
	return t, done, err
}
