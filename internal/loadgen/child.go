package loadgen

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/vk-ci/vk/hub"
)

// ServeHub is the hub a run starts when the load generator is its own
// hub binary (vk-bench, and this package's tests): it takes the
// arguments StartHub adds, `serve --config FILE --log-format json`,
// and runs hub.Run with that configuration file until SIGTERM, logging
// JSON to logw. It returns the process's exit code.
func ServeHub(args []string, logw io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(logw)
	cfgPath := fs.String("config", "", "the hub's configuration file")
	format := fs.String("log-format", "json", "json only")
	if len(args) == 0 || args[0] != "serve" || fs.Parse(args[1:]) != nil || *cfgPath == "" || *format != "json" {
		fmt.Fprintln(logw, "loadgen hub: want serve --config FILE --log-format json")
		return 2
	}
	cfg, err := hub.LoadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintln(logw, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := hub.Run(ctx, cfg, slog.New(slog.NewJSONHandler(logw, nil))); err != nil {
		fmt.Fprintln(logw, err)
		return 1
	}
	return 0
}
