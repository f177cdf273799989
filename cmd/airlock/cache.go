package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"airlock/client"
)

func init() {
	c := &cobra.Command{
		Use:   "cache ls|stats|purge",
		Short: "Look into or empty the appliance's shared package cache",
		Long: `The package cache keeps npm tarballs and PyPI wheels and sdists whose bytes
matched the registry's digest, and serves them to later sandboxes once their
policy allowed the download ([packages.cache] in the appliance config).`,
		Example: `  airlock cache stats
  airlock cache ls --name left-pad
  airlock cache purge --name left-pad
  airlock cache purge --all`,
		Args: cobra.NoArgs,
	}
	c.AddCommand(cacheLsCmd(), cacheStatsCmd(), cachePurgeCmd())
	rootCmd.AddCommand(c)
}

func cacheLsCmd() *cobra.Command {
	var name string
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls [--name NAME]",
		Short:   "List the cached artifacts, most recently used first",
		Example: "  airlock cache ls\n  airlock cache ls --name left-pad --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			es, err := apiClient().CacheEntries(ctx, name)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), es)
			}
			printCacheEntries(cmd.OutOrStdout(), es)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "only this package")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addSocketFlag(c)
	return c
}

func printCacheEntries(w io.Writer, es []client.CacheEntry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ECOSYSTEM\tNAME\tVERSION\tSIZE\tHITS\tUSED\tSCOPE")
	for _, e := range es {
		scope := e.Scope
		if scope == "" {
			scope = "shared"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Ecosystem, e.Name, e.Version, e.Size, e.Hits, e.Used.Format("2006-01-02 15:04:05Z07:00"), scope)
	}
	tw.Flush()
}

func cacheStatsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "stats",
		Short:   "Print the cache's size and its hits, misses and evictions since the start",
		Example: "  airlock cache stats\n  airlock cache stats --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			s, err := apiClient().CacheStats(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), s)
			}
			w := cmd.OutOrStdout()
			if !s.Enabled {
				fmt.Fprintln(w, "package cache: off ([packages.cache] max_mb in the appliance config)")
				return nil
			}
			fmt.Fprintf(w, "artifacts: %d, %d of %d bytes\nhits: %d  misses: %d  stored: %d  evicted: %d  dropped (digest mismatch): %d\nmetadata documents: %d\n",
				s.Entries, s.Bytes, s.MaxBytes, s.Hits, s.Misses, s.Stores, s.Evictions, s.Corrupt, s.MetaEntries)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addSocketFlag(c)
	return c
}

func cachePurgeCmd() *cobra.Command {
	var req client.CachePurgeRequest
	var all bool
	c := &cobra.Command{
		Use:     "purge --all | [--ecosystem ECO] [--name NAME]",
		Short:   "Remove cached artifacts (and all cached metadata)",
		Example: "  airlock cache purge --name left-pad\n  airlock cache purge --ecosystem pypi\n  airlock cache purge --all",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (req.Ecosystem != "" || req.Name != "") {
				return usagef("cache purge: say --all, or which artifacts with --ecosystem or --name (not both)")
			}
			ctx, cancel := signalContext()
			defer cancel()
			res, err := apiClient().PurgeCache(ctx, req)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %d artifacts (%d bytes)\n", res.Entries, res.Bytes)
			return nil
		},
	}
	c.Flags().StringVar(&req.Ecosystem, "ecosystem", "", "only this ecosystem (npm, pypi)")
	c.Flags().StringVar(&req.Name, "name", "", "only this package")
	c.Flags().BoolVar(&all, "all", false, "every artifact")
	addSocketFlag(c)
	return c
}
