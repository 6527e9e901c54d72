// Command omni-client shows how a Go service uses the omni-grpc stubs:
//
//	omni-client run [-addr HOST:PORT] [-tls-ca FILE] [-approve] [-abort-after N] [-drop-after N]
//	                [-print-ids] PROMPT
//	omni-client trace FILE.binpb   # print a trace written by `omni-grpc convert`
//	omni-client echo               # delimited OmniMessages: stdin -> parse -> stdout
//
// run prints the streamed assistant text on stdout and what happens around
// it (session, tool calls, approvals, reconnects, abort) on stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCommand(os.Args[2:])
	case "trace":
		if len(os.Args) != 3 {
			usage()
		}
		err = printTrace(os.Args[2], os.Stdout)
	case "echo":
		err = echo(os.Stdin, os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "omni-client:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: omni-client run [flags] PROMPT | trace FILE | echo")
	os.Exit(2)
}

func runCommand(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:50051", "AgentService address")
	approve := fs.Bool("approve", false, "approve tool calls (runs in ASK approval mode)")
	abortAfter := fs.Int("abort-after", 0, "call Abort after N responses")
	dropAfter := fs.Int("drop-after", 0, "drop the connection after N responses, then Attach")
	tlsCA := fs.String("tls-ca", "", "connect over TLS, trusting this CA file (a load balancer's)")
	printIDs := fs.Bool("print-ids", false, "print each response's event id instead of the text")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("run needs exactly one PROMPT")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()

	// snippet:start go-dial
	dialCtx, dialCancel := context.WithTimeout(ctx, 10*time.Second)
	defer dialCancel()
	// grpc-go 1.33 (Debian 12) predates insecure.NewCredentials().
	// The server's message size limit (2 x the 64 MiB record limit + 1 MiB):
	// a message at the record limit fits, with its JSON beside it.
	const maxMessage = 129 << 20
	security := grpc.WithInsecure()
	if *tlsCA != "" {
		creds, err := credentials.NewClientTLSFromFile(*tlsCA, "")
		if err != nil {
			return fmt.Errorf("-tls-ca: %w", err)
		}
		security = grpc.WithTransportCredentials(creds)
	}
	conn, err := grpc.DialContext(dialCtx, *addr, security, grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return fmt.Errorf("dial %s: %w", *addr, err)
	}
	defer conn.Close()

	r := &runner{
		client: omniv1.NewAgentServiceClient(conn), out: os.Stdout, log: os.Stderr,
		approve: *approve, abortAfter: *abortAfter, dropAfter: *dropAfter,
	}
	// snippet:end go-dial
	r.printIDs = *printIDs
	return r.run(ctx, fs.Arg(0))
}
