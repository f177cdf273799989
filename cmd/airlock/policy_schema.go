//go:build !airlock_thin

package main

import (
	"github.com/spf13/cobra"

	"airlock/policies"
)

var policySchemaCmd = &cobra.Command{
	Use:   "schema",
	Short: "Print the JSON Schema of the policy language (docs/policy.schema.json)",
	Long: `Print the JSON Schema (draft 2020-12) of the policy language, generated from
the key lists the loader uses. docs/policy.schema.json is this output; point
an editor at it with a first line

  #:schema ../../docs/policy.schema.json

(taplo / Even Better TOML read it: completion, hover text and inline errors).
The schema catches unknown keys, wrong types and words; 'airlock policy
check' does everything else.`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		b, err := policies.Schema()
		if err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(b)
		return err
	},
}

func init() { policyCmd.AddCommand(policySchemaCmd) }
