package e2e

import (
	"context"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
)

// logsServer is a real OTLP/gRPC logs endpoint that keeps what it receives.
type logsServer struct {
	plogotlp.UnimplementedGRPCServer
	addr string

	mu       sync.Mutex
	received []plog.Logs
	notify   chan struct{}
}

func startLogsServer(t testing.TB) *logsServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &logsServer{addr: lis.Addr().String(), notify: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	plogotlp.RegisterGRPCServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

// Export implements plogotlp.GRPCServer.
func (s *logsServer) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	l := plog.NewLogs()
	req.Logs().CopyTo(l)
	s.mu.Lock()
	s.received = append(s.received, l)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return plogotlp.NewExportResponse(), nil
}

func (s *logsServer) all() []plog.Logs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]plog.Logs(nil), s.received...)
}
