package hubclient

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
)

// A hub whose self-made certificate does not name the host a join
// dialled is refused with a hint to add the host to tls.names, with --ca
// and on first use alike.
func TestJoinHostnameHint(t *testing.T) {
	b, err := pki.Ensure(t.TempDir(), nil, time.Now()) // names localhost and loopback only
	if err != nil {
		t.Fatal(err)
	}
	// 127.0.0.2 is loopback on Linux but not among the certificate's names.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = pki.ServerConfig(b.Server)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hubURL := "https://" + ln.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, ca := range [][]byte{b.CACertPEM, nil} {
		_, _, err := Join(ctx, hubURL, "vkj_node_x", ca, "n", KindNode)
		if err == nil || !strings.Contains(err.Error(), `add it to tls.names`) || !strings.Contains(err.Error(), `"127.0.0.2"`) {
			t.Errorf("join (ca %v) = %v, want the tls.names hint", ca != nil, err)
		}
	}
}
