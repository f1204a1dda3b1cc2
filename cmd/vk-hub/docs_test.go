package main

import (
	"testing"

	"github.com/vk-ci/vk/internal/doccheck"
)

// Every vk-hub command line README and docs/ show parses with the real
// command tree: its subcommands exist, its flags are known, and a full
// command line has the arguments the command takes.
func TestDocumentedCommandsParse(t *testing.T) {
	doccheck.CheckCommands(t, "vk-hub", newRoot, "../../README.md", "../../docs/*.md", "../../deploy/*.service")
}
