package e2e

import (
	"context"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	// The otlp_grpc exporter compresses with gzip by default.
	_ "google.golang.org/grpc/encoding/gzip"
)

// profilesServer is a real OTLP/gRPC profiles endpoint that keeps what it
// receives.
type profilesServer struct {
	pprofileotlp.UnimplementedGRPCServer
	addr string

	mu       sync.Mutex
	received []pprofile.Profiles
	notify   chan struct{}
}

func startProfilesServer(t testing.TB) *profilesServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &profilesServer{addr: lis.Addr().String(), notify: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

// Export implements pprofileotlp.GRPCServer.
func (s *profilesServer) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	p := pprofile.NewProfiles()
	req.Profiles().CopyTo(p)
	s.mu.Lock()
	s.received = append(s.received, p)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return pprofileotlp.NewExportResponse(), nil
}

func (s *profilesServer) all() []pprofile.Profiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pprofile.Profiles(nil), s.received...)
}
