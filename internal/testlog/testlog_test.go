package testlog

import "testing"

func TestNewLogsAndSurvivesCleanup(t *testing.T) {
	var log = New(t)
	log.Info("hello", "k", "v")
	Discard().Info("dropped")
}
