package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/daemon"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/node"
	"github.com/hyp-project/hyp/internal/query"
	"github.com/hyp-project/hyp/internal/sink"
)

func daemonCmd(g *globals) *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the ingest listener, flush, retention, compaction and control socket",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, cfg, err := g.load(cfgPath)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return daemon.Run(cmd.Context(), dir, cfg, log, nil)
		},
	}
	configFlag(cmd, &cfgPath, defaultConfigUsage)
	return cmd
}

func serverCmd(g *globals) *cobra.Command {
	var cfgPath string
	var o daemon.ServerOptions
	var tlsFiles config.ListenerTLS
	cmd := &cobra.Command{
		Use:   "server --listen ADDR --token-file F [--tls-cert F --tls-key F [--client-ca F]]",
		Short: "Run the central receiver of forwarded rows (with its own cache and sinks)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Listen == "" || o.TokenFile == "" {
				return usagef("--listen and --token-file are required")
			}
			if o.RateLimit < 0 {
				return usagef("--rate-limit must not be negative")
			}
			var err error
			if o.TLS, err = serverTLS(tlsFiles); err != nil {
				return err
			}
			dir, cfg, err := g.load(cfgPath)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return daemon.RunServer(cmd.Context(), dir, cfg, o, log, nil)
		},
	}
	cmd.AddCommand(serverStatusCmd(g))
	cmd.Flags().StringVar(&o.Listen, "listen", "", "address of the forward protocol listener, e.g. 0.0.0.0:18522")
	cmd.Flags().StringVar(&o.TokenFile, "token-file", "", "file of accepted bearer tokens, one per line")
	cmd.Flags().Float64Var(&o.RateLimit, "rate-limit", 0, "rows per second admitted across all gateways; above it senders get 429 (0 = no limit)")
	cmd.Flags().StringVar(&tlsFiles.CertFile, "tls-cert", "", "PEM certificate (chain) of the listener: serve HTTPS; needs --tls-key")
	cmd.Flags().StringVar(&tlsFiles.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().StringVar(&tlsFiles.ClientCAFile, "client-ca", "", "PEM CA certificates: demand a client certificate issued by one of them (mutual TLS)")
	configFlag(cmd, &cfgPath, defaultConfigUsage)
	return cmd
}

// serverTLS checks the server's TLS flags and makes their paths absolute; nil means plain
// HTTP.
func serverTLS(f config.ListenerTLS) (*config.ListenerTLS, error) {
	switch {
	case f == (config.ListenerTLS{}):
		return nil, nil
	case f.CertFile == "" && f.KeyFile != "":
		return nil, usagef("--tls-key needs --tls-cert")
	case f.CertFile == "":
		return nil, usagef("--client-ca needs --tls-cert and --tls-key")
	case f.KeyFile == "":
		return nil, usagef("--tls-cert needs --tls-key")
	}
	for _, p := range []*string{&f.CertFile, &f.KeyFile, &f.ClientCAFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	return &f, nil
}

func serverStatusCmd(g *globals) *cobra.Command {
	var cfgPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Replicas and the committer (cluster mode), and per gateway its incarnations, rows stored, staged and commit lag",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, cfg, err := g.load(cfgPath)
			if err != nil {
				return err
			}
			r, err := daemon.ServerStatus(cmd.Context(), dir, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, r)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			if cfg.Server.Cluster != nil {
				committer := r.Committer
				if committer == "" {
					committer = "(none)"
				}
				fmt.Printf("committer: %s\n\n", committer)
				fmt.Fprintln(tw, "REPLICA\tADDR\tALIVE\tLAST HEARTBEAT")
				for _, rp := range r.Replicas {
					fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", rp.ID, rp.Addr, rp.Alive, rp.Heartbeat.UTC().Format(time.RFC3339))
				}
				fmt.Fprintln(tw)
			}
			fmt.Fprintln(tw, "GATEWAY\tLAST SEEN\tROWS STORED\tROWS STAGED\tCOMMIT LAG\tINCARNATIONS")
			for _, gw := range r.Gateways {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0fs\t%d\n", gw.Gateway, gw.LastSeen.UTC().Format(time.RFC3339), gw.RowsStored, gw.RowsStaged, gw.CommitLagSeconds, len(gw.Incarnations))
			}
			fmt.Fprintln(tw, "\nGATEWAY\tINCARNATION\tFIRST SEEN\tLAST SEEN\tROWS\tCONCURRENT AT")
			for _, gw := range r.Gateways {
				for _, inc := range gw.Incarnations {
					id, concurrent := inc.ID, "-"
					if id == "" {
						id = `""`
					}
					if !inc.ConcurrentAt.IsZero() {
						concurrent = inc.ConcurrentAt.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", gw.Gateway, id, inc.FirstSeen.UTC().Format(time.RFC3339), inc.LastSeen.UTC().Format(time.RFC3339), inc.Rows, concurrent)
				}
			}
			return tw.Flush()
		},
	}
	configFlag(cmd, &cfgPath, "the server's config file (default <home>/hyp.yaml)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

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

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func printLosses(w io.Writer, lost []cache.Lost) {
	if len(lost) == 0 {
		return
	}
	fmt.Fprintf(w, "\nLOST ROWS (%d ranges; the bytes are kept)\n", len(lost))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tPARTITION\tSEQ RANGE\tROWS\tDETECTED\tREASON\tKEPT AT")
	for _, x := range lost {
		fmt.Fprintf(tw, "%s\t%s\t%d..%d\t%d\t%s\t%s\t%s\n", x.Dataset, x.Partition, x.FromSeq, x.ToSeq, x.Rows, x.DetectedAt.Format(time.RFC3339), x.Reason, x.KeptAt)
	}
	tw.Flush()
}

func printCacheStatus(w io.Writer, st []cache.PartitionStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tPARTITION\tROWS\tFILES\tBYTES\tSEQ RANGE\tOLDEST\tNEWEST")
	var unreadable []cache.PartitionStatus
	for _, p := range st {
		if p.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\tUNREADABLE\t-\t-\t-\t-\t-\n", p.Dataset, p.Partition)
			unreadable = append(unreadable, p)
			continue
		}
		oldest, newest := "-", "-"
		if p.Rows > 0 {
			oldest, newest = p.OldestIngestedAt.Format(time.RFC3339), p.NewestIngestedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d..%d\t%s\t%s\n", p.Dataset, p.Partition, p.Rows, p.Files, p.Bytes, p.MinSeq, p.MaxSeq, oldest, newest)
	}
	tw.Flush()
	for _, p := range unreadable {
		fmt.Fprintf(w, "\n%s/%s cannot be read: %v\n", p.Dataset, p.Partition, p.Err)
	}
}

func statusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Daemon, datasets and sinks at a glance",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, cfg, err := g.load("")
			if err != nil {
				return err
			}
			cl, derr := control.Dial(cmd.Context(), home.Socket(dir))
			running := derr == nil
			cacheErr := ""
			if running {
				cacheErr = cl.CacheError()
			}
			// A home with no cache yet is reported as it is, without creating it.
			var sinks []sink.InstanceStatus
			if _, err := os.Stat(home.Cache(dir)); err != nil {
				for _, name := range sinkNames(cfg) {
					sinks = append(sinks, sink.InstanceStatus{Instance: name, Type: cfg.Sinks[name].Type})
				}
			} else if err := withAPI(cmd.Context(), dir, func(api control.API) error {
				sinks, err = api.SinkStatus(cmd.Context(), "")
				return err
			}); err != nil {
				return err
			}
			r, err := cache.OpenReader(cmd.Context(), home.Cache(dir))
			if err != nil {
				return err
			}
			st := r.Status()
			lost, err := r.Losses()
			if err != nil {
				return err
			}
			summary := summarizeSinks(sinks)
			if asJSON {
				return printJSON(os.Stdout, statusOut{
					Daemon:   daemonOut{CacheError: cacheErr, Listen: cfg.Ingest.Listen, Running: running},
					Datasets: datasetsOut(st),
					Home:     dir,
					Losses:   nonNil(lost),
					Sinks:    summary,
				})
			}
			state := "not running"
			if running {
				state = "running (ingest on " + cfg.Ingest.Listen + ")"
			}
			if cacheErr != "" {
				state += "; NOT TAKING ROWS: " + cacheErr
			}
			fmt.Printf("home:    %s\ndaemon:  %s\n\n", dir, state)
			printCacheStatus(os.Stdout, st)
			printLosses(os.Stdout, lost)
			fmt.Println()
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SINK\tTYPE\tPARTITIONS\tLAG ROWS\tOLDEST UNEXPORTED\tLAST EXPORT\tGAPS\tERRORS")
			for _, s := range summary {
				age, last := "-", "-"
				if s.LagRows > 0 {
					age = (time.Duration(s.OldestUnexportedAgeSeconds) * time.Second).String()
				}
				if s.LastExportAt != nil {
					last = s.LastExportAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\n", s.Instance, s.Type, s.Partitions, s.LagRows, age, last, s.Gaps, len(s.Errors))
			}
			return tw.Flush()
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func summarizeSinks(st []sink.InstanceStatus) []sinkSummary {
	out := []sinkSummary{}
	for _, is := range st {
		s := sinkSummary{Instance: is.Instance, Type: is.Type, Partitions: len(is.Partitions), Errors: []string{}}
		if is.Error != "" {
			s.Errors = append(s.Errors, is.Error)
		}
		for _, p := range is.Partitions {
			s.LagRows += p.LagRows
			s.ExportedRows += p.ExportedRows
			s.OldestUnexportedAgeSeconds = max(s.OldestUnexportedAgeSeconds, p.OldestUnexportedAgeSeconds)
			if p.LastExportAt != nil && (s.LastExportAt == nil || p.LastExportAt.After(*s.LastExportAt)) {
				s.LastExportAt = p.LastExportAt
			}
			s.Gaps += len(p.Gaps)
			for _, g := range p.Gaps {
				s.GapRows += g.Rows
			}
			s.WithheldRows += p.WithheldRows
			s.Quarantined += len(p.Quarantined)
			if p.LastError != "" {
				s.Errors = append(s.Errors, p.Dataset+" "+p.Partition+": "+p.LastError)
			}
		}
		out = append(out, s)
	}
	return out
}

func sinkNames(cfg *config.Config) []string {
	names := []string{}
	for n := range cfg.Sinks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func cacheCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cache", Short: "Inspect and maintain the cache"}
	var statusJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Per dataset and partition: rows, files, bytes, seq range, ingest times",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.resolve()
			if err != nil {
				return err
			}
			r, err := openReader(cmd.Context(), dir)
			if err != nil {
				return err
			}
			lost, err := r.Losses()
			if err != nil {
				return err
			}
			if statusJSON {
				return printJSON(os.Stdout, cacheOut{Datasets: datasetsOut(r.Status()), Losses: nonNil(lost)})
			}
			printCacheStatus(os.Stdout, r.Status())
			printLosses(os.Stdout, lost)
			return nil
		},
	}
	jsonFlag(status, &statusJSON)

	var req node.CompactRequest
	var compactJSON bool
	compact := &cobra.Command{
		Use:   "compact",
		Short: "Compact partitions now",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Dataset != "" && !cache.ValidDataset(req.Dataset) {
				return usagef("bad --dataset %q", req.Dataset)
			}
			req.Force = true
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]cache.CompactResult, error) {
				return api.Compact(ctx, req)
			})
			if err != nil {
				return err
			}
			if compactJSON {
				return printJSON(os.Stdout, newCompactOut(res))
			}
			for _, r := range res {
				if r.Skipped != "" {
					fmt.Printf("%s %s: skipped (%s)\n", r.Dataset, r.Partition, r.Skipped)
					continue
				}
				fmt.Printf("%s %s: %d files -> %d (%d rows, %s -> %s)\n", r.Dataset, r.Partition, r.FilesBefore, r.FilesAfter, r.Rows, r.From, r.To)
			}
			if len(res) == 0 {
				fmt.Println("no matching partitions")
			}
			return nil
		},
	}
	compact.Flags().StringVar(&req.Dataset, "dataset", "", "only this dataset")
	compact.Flags().StringVar(&req.Partition, "partition", "", "only this partition (source=<value>)")
	jsonFlag(compact, &compactJSON)

	var dryRun, pruneJSON bool
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Apply retention now; says what it deletes and what it holds for sinks",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]cache.PruneResult, error) {
				return api.Prune(ctx, dryRun)
			})
			if err != nil {
				return err
			}
			if pruneJSON {
				return printJSON(os.Stdout, newPruneOut(dryRun, res))
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			for _, r := range res {
				fmt.Printf("%s %s: %s %d rows (seq <= %d)", r.Dataset, r.Partition, verb, r.DeletedRows, r.ThroughSeq)
				if r.HeldRows > 0 {
					fmt.Printf(", held %d expired rows for %s", r.HeldRows, strings.Join(r.HeldFor, ", "))
				}
				for _, l := range r.Losses {
					fmt.Printf(", max_age forces out seq %d..%d (%d rows) that %s has not exported", l.First, l.Last, l.Rows, l.Consumer)
				}
				fmt.Println()
			}
			if len(res) == 0 {
				fmt.Println("nothing to prune")
			}
			return nil
		},
	}
	prune.Flags().BoolVar(&dryRun, "dry-run", false, "report only; change nothing")
	jsonFlag(prune, &pruneJSON)

	var repairDry, repairJSON bool
	repair := &cobra.Command{
		Use:   "repair",
		Short: "Set aside (keep) unreadable cache files and record their seq ranges as losses, so reads work again",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]cache.Repaired, error) {
				return api.Repair(ctx, repairDry)
			})
			if err != nil {
				return err
			}
			if repairJSON {
				return printJSON(os.Stdout, repairOut{DryRun: repairDry, Files: nonNil(res)})
			}
			verb := "set aside"
			if repairDry {
				verb = "would set aside"
			}
			for _, r := range res {
				fmt.Printf("%s %s: %s %s (seq %d..%d, %d rows lost): %s\n", r.Dataset, r.Partition, verb, r.File, r.FromSeq, r.ToSeq, r.Rows, r.Reason)
			}
			if len(res) == 0 {
				fmt.Println("every cache data file reads whole")
			}
			return nil
		},
	}
	repair.Flags().BoolVar(&repairDry, "dry-run", false, "report only; change nothing")
	jsonFlag(repair, &repairJSON)
	cmd.AddCommand(status, compact, prune, repair)
	return cmd
}

// lakeTables describes an iceberg sink's tables for a query; done removes the copies of
// files an S3 warehouse needed.
func lakeTables(ctx context.Context, dir, instance string) ([]query.Table, func(), error) {
	cfg, err := loadConfig(dir, "")
	if err != nil {
		return nil, nil, err
	}
	l, err := sink.OpenLake(ctx, cfg, instance)
	if errors.Is(err, sink.ErrUnknownSink) || errors.Is(err, sink.ErrNotIceberg) {
		return nil, nil, usageError{err}
	}
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	scratch, err := os.MkdirTemp("", "hyp-query-")
	if err != nil {
		return nil, nil, err
	}
	done := func() { os.RemoveAll(scratch) }
	tfs, err := l.Tables(ctx, scratch)
	if err != nil {
		done()
		return nil, nil, err
	}
	return query.FromLake(l.Namespace(), tfs), done, nil
}

func queryCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "query", Short: "Query the cache"}
	var opts query.Options
	var sinkName string
	sql := &cobra.Command{
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
	sql.Flags().StringVar(&opts.Format, "format", "table", "table, json, jsonl or csv")
	sql.Flags().BoolVar(&opts.Internal, "internal", false, "expose _hyp_ingest_seq, _hyp_ingested_at and _hyp_partition")
	sql.Flags().StringVar(&sinkName, "sink", "", "run the SQL over this iceberg sink's tables instead of the cache")

	var schemaJSON bool
	schema := &cobra.Command{
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
			all := append([]cache.Column{{Name: cache.SeqColumn, Type: cache.TypeLong}, {Name: cache.IngestedAtColumn, Type: cache.TypeTimestamp}}, cols...)
			qcols := make([]query.Column, len(all))
			for i, c := range all {
				qcols[i] = query.Column{Name: c.Name, Type: c.Type.String()}
			}
			qnames := query.Names(qcols)
			if schemaJSON {
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
	jsonFlag(schema, &schemaJSON)
	cmd.AddCommand(sql, schema)
	return cmd
}

func sinkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sink", Short: "Configured sinks"}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List configured sinks",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := g.load("")
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, newSinkListOut(cfg))
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INSTANCE\tTYPE\tSCHEDULE\tTARGET")
			for _, name := range sinkNames(cfg) {
				s := cfg.Sinks[name]
				target := s.URL.Redacted().String()
				switch {
				case s.Type == "blob" && s.Destination.Type == "s3":
					target = s.Format + " -> " + strings.TrimSuffix("s3://"+s.Destination.Bucket+"/"+s.Destination.Prefix, "/")
				case s.Type == "blob":
					target = s.Format + " -> " + s.Destination.Path
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, s.Type, s.Schedule, target)
			}
			return tw.Flush()
		},
	}
	jsonFlag(list, &asJSON)
	cmd.AddCommand(list, sinkStatusCmd(g), sinkRunCmd(g), sinkRewindCmd(g), sinkMaintainCmd(g))
	return cmd
}
