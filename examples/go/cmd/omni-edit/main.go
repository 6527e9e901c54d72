// Command omni-edit shows how a Go program edits a `.binpb` trace with the
// typed fields, and what `omni-grpc convert` then writes back as JSON:
//
//	omni-edit [OP...] < in.binpb > out.binpb # apply each OP to every record
//	omni-edit build > out.binpb              # messages built from typed fields only
//
// OPs (each applies where the record has that field):
//
//	clear-fidelity          drop fidelity (the Struct; fidelity_json alone is stale)
//	clear-origin            make the message the main session's
//	clear-images            drop tool_call_output images
//	clear-tools             drop the legacy session_meta tool list
//	prepend-origin=HOP      add an outer origin hop, as the reference withOrigin does
//	set-fidelity=KEY=JSON   set one fidelity key (the others keep their bytes)
//	set-stop-reason=N       an enum number, known or from a newer schema
//
// Records are parsed with proto.Unmarshal's default options.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/omni-grpc/omni-grpc/examples/go/delimited"
	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

func main() {
	out := bufio.NewWriter(os.Stdout)
	var err error
	if len(os.Args) == 2 && os.Args[1] == "build" {
		err = build(out)
	} else {
		err = edit(os.Args[1:], os.Stdin, out)
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "omni-edit:", err)
		os.Exit(1)
	}
}

func edit(ops []string, in io.Reader, out io.Writer) error {
	reader := delimited.NewReader(in)
	for {
		m := &omniv1.OmniMessage{}
		err := reader.Next(m)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, op := range ops {
			if err := apply(op, m); err != nil {
				return err
			}
		}
		if err := delimited.Write(out, m); err != nil {
			return err
		}
	}
}

// fidelityOf returns the payload's fidelity slot, or nil for payloads without one.
func fidelityOf(m *omniv1.OmniMessage) **structpb.Struct {
	switch p := m.Payload.(type) {
	case *omniv1.OmniMessage_Text:
		return &p.Text.Fidelity
	case *omniv1.OmniMessage_Thinking:
		return &p.Thinking.Fidelity
	case *omniv1.OmniMessage_ToolCall:
		return &p.ToolCall.Fidelity
	case *omniv1.OmniMessage_InlineData:
		return &p.InlineData.Fidelity
	case *omniv1.OmniMessage_InlineThinking:
		return &p.InlineThinking.Fidelity
	}
	return nil
}

func apply(op string, m *omniv1.OmniMessage) error {
	name, arg, _ := strings.Cut(op, "=")
	switch name {
	case "clear-fidelity":
		if f := fidelityOf(m); f != nil {
			*f = nil
		}
	case "clear-origin":
		m.Origin = nil
	case "clear-images":
		if p, ok := m.Payload.(*omniv1.OmniMessage_ToolCallOutput); ok {
			p.ToolCallOutput.Images = nil
		}
	case "clear-tools":
		if p, ok := m.Payload.(*omniv1.OmniMessage_SessionMeta); ok {
			p.SessionMeta.Tools = nil
		}
	case "prepend-origin":
		m.Origin = append([]string{arg}, m.Origin...)
	case "set-fidelity":
		key, text, ok := strings.Cut(arg, "=")
		var value interface{}
		if !ok || json.Unmarshal([]byte(text), &value) != nil {
			return fmt.Errorf("set-fidelity wants KEY=JSON, got %q", arg)
		}
		v, err := structpb.NewValue(value)
		if err != nil {
			return err
		}
		if f := fidelityOf(m); f != nil && *f != nil {
			(*f).Fields[key] = v
		}
	case "set-stop-reason":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return fmt.Errorf("set-stop-reason wants a number, got %q", arg)
		}
		if p, ok := m.Payload.(*omniv1.OmniMessage_Text); ok {
			p.Text.StopReason = omniv1.StopReason(n)
		}
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	return nil
}

// build writes messages the way a Go producer makes them: typed fields only,
// no envelope type, no hints.
func build(out io.Writer) error {
	fidelity, err := structpb.NewStruct(map[string]interface{}{"zeta": 1, "alpha": []interface{}{1.5, "x"}})
	if err != nil {
		return err
	}
	ts := "2026-01-02T03:04:05.678Z"
	msgs := []*omniv1.OmniMessage{
		{Timestamp: ts, Payload: &omniv1.OmniMessage_SessionMeta{SessionMeta: &omniv1.SessionMeta{
			SessionId: "go-1", Provider: "p", ModelId: "m",
			ModelContextWindow: &omniv1.SessionMeta_ModelContextWindowTokens{ModelContextWindowTokens: 200000},
			AgentState:         "/a", Workspace: "/w"}}},
		{Timestamp: ts, Payload: &omniv1.OmniMessage_Text{Text: &omniv1.Text{
			Role: omniv1.Role_ROLE_ASSISTANT, Text: "built in Go", StopReason: omniv1.StopReason_STOP_REASON_COMPLETED,
			Fidelity: fidelity}}},
		{Timestamp: ts, Payload: &omniv1.OmniMessage_ToolListReady{ToolListReady: &omniv1.ToolListReady{
			Tools: []*omniv1.ToolDefinition{{Name: "ls", Description: "list",
				Parameters: `{"type":"object","properties":{"path":{"type":"string"}}}`}}}}},
		{Timestamp: ts, Origin: []string{"child"}, Payload: &omniv1.OmniMessage_TokenUsage{TokenUsage: &omniv1.TokenUsage{
			Request: &omniv1.TokenCounts{Output: 3, Total: 3}}}},
		{Timestamp: ts, Payload: &omniv1.OmniMessage_Abort{Abort: &omniv1.Abort{}}},
	}
	for _, m := range msgs {
		if err := delimited.Write(out, m); err != nil {
			return err
		}
	}
	return nil
}
