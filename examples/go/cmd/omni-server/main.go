// Command omni-server is an AgentService written in Go: a scripted,
// deterministic engine that any omni-grpc client (or the Python gateway,
// `omni-grpc serve --engine grpc://ADDR`) can consume.
//
//	omni-server -addr 127.0.0.1:50061
//
// It prints "listening on HOST:PORT" once it accepts connections.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/omni-grpc/omni-grpc/examples/go/scripted"
	"google.golang.org/grpc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (port 0 picks a free port)")
	flag.Parse()

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("omni-server: %v", err)
	}
	g := grpc.NewServer()
	scripted.NewServer().Register(g)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		g.GracefulStop()
	}()
	fmt.Printf("listening on %s\n", lis.Addr())
	if err := g.Serve(lis); err != nil {
		log.Fatalf("omni-server: %v", err)
	}
}
