package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/sink"
)

func configCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check a config file, or print the effective config"}
	cmd.AddCommand(configValidateCmd(g), configShowCmd(g))
	return cmd
}

func configValidateCmd(g *globals) *cobra.Command {
	var cfgPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a config file: every problem with its line (exit 2 if there is any)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.resolve()
			if err != nil {
				return err
			}
			r := config.CheckFile(dir, cfgPath, sink.Checks())
			if asJSON {
				if err := printJSON(os.Stdout, r); err != nil {
					return err
				}
			} else if r.Valid && r.Found {
				fmt.Printf("%s: ok\n", r.File)
			} else if r.Valid {
				fmt.Printf("%s: not there, so the embedded defaults apply: ok\n", r.File)
			}
			if err := r.Err(); err != nil {
				return usageError{err}
			}
			return nil
		},
	}
	configFlag(cmd, &cfgPath, defaultConfigUsage)
	jsonFlag(cmd, &asJSON)
	return cmd
}

func configShowCmd(g *globals) *cobra.Command {
	var cfgPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the effective config: defaults included, variables expanded, secrets redacted",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := g.load(cfgPath)
			if err != nil {
				return err
			}
			s, err := config.Show(cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, s)
			}
			out, err := s.YAML()
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(out)
			return err
		},
	}
	configFlag(cmd, &cfgPath, defaultConfigUsage)
	jsonFlag(cmd, &asJSON)
	return cmd
}
