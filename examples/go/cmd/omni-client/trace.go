package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
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
		view := fidelity.AsMap()
		withBase64(view, msg.GetBase64Values())
		b, err := json.Marshal(view)
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

// withBase64 puts back each fidelity string a .binpb record stores as bytes
// (base64_values): at its path the Struct holds "", and the text is the
// standard base64 of the bytes. A value that is no longer "" was edited.
func withBase64(view map[string]any, hints []*omniv1.Base64Value) {
	const prefix = "/payload/fidelity/"
	for _, h := range hints {
		if !strings.HasPrefix(h.GetPath(), prefix) {
			continue
		}
		text := base64.StdEncoding.EncodeToString(h.GetData())
		parts := strings.Split(h.GetPath()[len(prefix):], "/")
		var node any = view
		for i, part := range parts {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			last := i == len(parts)-1
			switch n := node.(type) {
			case map[string]any:
				if s, ok := n[part].(string); last && ok && s == "" {
					n[part] = text
				}
				node = n[part]
			case []any:
				idx, err := strconv.Atoi(part)
				if err != nil || idx < 0 || idx >= len(n) {
					node = nil
					continue
				}
				if s, ok := n[idx].(string); last && ok && s == "" {
					n[idx] = text
				}
				node = n[idx]
			default:
				node = nil
			}
		}
	}
}
