package main

import (
	"testing"

	"github.com/vk-ci/vk/internal/doccheck"
)

// Every vk-bench command line README and docs/ show parses with the real
// command: its flags are known and it takes no arguments.
func TestDocumentedCommandsParse(t *testing.T) {
	doccheck.CheckCommands(t, "vk-bench", newRoot, "../../README.md", "../../docs/*.md")
}
