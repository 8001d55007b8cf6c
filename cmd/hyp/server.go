package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/daemon"
)

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
			dir, cfg, err := g.loadToRun(cfgPath)
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
