package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/omni-grpc/omni-grpc/examples/go/delimited"
	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// printTrace prints one line per message of a delimited .binpb trace:
// number, timestamp, payload kind, then the text and the fidelity map when
// the payload has them.
func printTrace(path string, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// snippet:start go-trace
	r := delimited.NewReader(f)
	for n := 1; ; n++ {
		msg := &omniv1.OmniMessage{}
		if err := r.Next(msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		line, err := describe(msg)
		if err != nil {
			return fmt.Errorf("%s: record %d: %w", path, n, err)
		}
		fmt.Fprintf(out, "#%d %s %s\n", n, msg.GetTimestamp(), line)
	}
	// snippet:end go-trace
}

// describe names the payload arm (the proto field name) and shows its text
// and fidelity, read through the typed accessors.
func describe(msg *omniv1.OmniMessage) (string, error) {
	pm := msg.ProtoReflect()
	arm := pm.WhichOneof(pm.Descriptor().Oneofs().ByName("payload"))
	if arm == nil {
		return "", fmt.Errorf("no payload")
	}
	parts := []string{string(arm.Name())}
	var fidelity *structpb.Struct
	switch p := msg.Payload.(type) {
	case *omniv1.OmniMessage_Text:
		parts = append(parts, "text="+quote(p.Text.GetText()))
		fidelity = p.Text.GetFidelity()
	case *omniv1.OmniMessage_Thinking:
		fidelity = p.Thinking.GetFidelity()
	case *omniv1.OmniMessage_ToolCall:
		parts = append(parts, "name="+quote(p.ToolCall.GetName()))
		fidelity = p.ToolCall.GetFidelity()
	case *omniv1.OmniMessage_InlineData:
		fidelity = p.InlineData.GetFidelity()
	case *omniv1.OmniMessage_InlineThinking:
		fidelity = p.InlineThinking.GetFidelity()
	case *omniv1.OmniMessage_Unknown:
		parts = append(parts, "type="+quote(p.Unknown.GetType()))
	}
	if fidelity != nil {
		// AsMap gives plain Go values; encoding/json sorts the keys.
		b, err := json.Marshal(fidelity.AsMap())
		if err != nil {
			return "", err
		}
		parts = append(parts, "fidelity="+string(b))
	}
	return strings.Join(parts, " "), nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// echo parses every delimited OmniMessage on in and writes it back to out,
// re-serialized from the typed message (nothing is copied as raw bytes).
func echo(in io.Reader, out io.Writer) error {
	r := delimited.NewReader(in)
	for {
		msg := &omniv1.OmniMessage{}
		if err := r.Next(msg); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := delimited.Write(out, msg); err != nil {
			return err
		}
	}
}
