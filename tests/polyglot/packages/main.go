// A Go program that knows omni-grpc only as the module
// github.com/omni-grpc/omni-grpc/generated/go, required through a replace.
// Prints one JSON line: the session, the payload kinds streamed, the listing,
// and the exact reference JSON the server sent for the run and the history
// (include_json).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/grpc"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	client := omniv1.NewAgentServiceClient(conn)
	stream, err := client.Run(ctx, &omniv1.RunRequest{
		Prompt: "hi from go", ApprovalMode: omniv1.ApprovalMode_APPROVAL_MODE_ALLOW_ALL,
		IncludeJson: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	session, kinds, runJSON := "", []string{}, []string{}
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		session = response.GetSessionId()
		runJSON = append(runJSON, response.GetJson())
		if message := response.GetMessage(); message != nil {
			kinds = append(kinds, fmt.Sprintf("%T", message.GetPayload()))
		} else {
			kinds = append(kinds, fmt.Sprintf("@%T", response.GetEvent().GetKind()))
		}
	}
	listed, err := client.ListSessions(ctx, &omniv1.ListSessionsRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ids := []string{}
	for _, s := range listed.GetSessions() {
		ids = append(ids, s.GetSessionId())
	}
	history, err := client.GetHistory(ctx, &omniv1.GetHistoryRequest{SessionId: session, IncludeJson: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	historyJSON := []string{}
	for {
		response, err := history.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		historyJSON = append(historyJSON, response.GetJson())
	}
	out, _ := json.Marshal(map[string]interface{}{
		"session": session, "kinds": kinds, "listed": ids, "runJson": runJSON, "historyJson": historyJSON,
	})
	fmt.Println(string(out))
}
