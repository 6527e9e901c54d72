package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/crc32"
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
		var view any = fidelity.AsMap()
		if _, elided := fidelity.GetFields()[elidedKey]; elided {
			var err error
			if view, err = fromExactText(msg, fidelity.AsMap()); err != nil {
				return "", err
			}
		}
		view, err := withBase64(view, msg.GetBase64Values())
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(view)
		if err != nil {
			return "", err
		}
		parts = append(parts, "fidelity="+string(b))
	}
	return strings.Join(parts, " "), nil
}

// A default .binpb record stores a fidelity_json once: its Struct holds only
// this key (true) in place of the view that repeated the text.
const elidedKey = "\x00fidelity_json"

// fromExactText builds the Struct view from fidelity_json (values nested
// deeper than the view's 16 levels read as null, as in the Struct), with the
// keys a program set beside the marker over it.
func fromExactText(msg *omniv1.OmniMessage, beside map[string]any) (map[string]any, error) {
	var text string
	switch p := msg.GetPayload().(type) {
	case *omniv1.OmniMessage_Text:
		text = p.Text.GetFidelityJson()
	case *omniv1.OmniMessage_Thinking:
		text = p.Thinking.GetFidelityJson()
	case *omniv1.OmniMessage_ToolCall:
		text = p.ToolCall.GetFidelityJson()
	case *omniv1.OmniMessage_InlineData:
		text = p.InlineData.GetFidelityJson()
	case *omniv1.OmniMessage_InlineThinking:
		text = p.InlineThinking.GetFidelityJson()
	}
	if text == "" {
		return nil, fmt.Errorf("fidelity's Struct was left out for fidelity_json, which is empty")
	}
	var view map[string]any
	if err := json.Unmarshal([]byte(text), &view); err != nil {
		return nil, fmt.Errorf("fidelity_json: %w", err)
	}
	for key, value := range view {
		view[key] = cut(value, 2)
	}
	for key, value := range beside {
		if key != elidedKey {
			view[key] = value
		}
	}
	return view, nil
}

func cut(v any, level int) any {
	switch x := v.(type) {
	case map[string]any:
		if level > 16 {
			return nil
		}
		for key, item := range x {
			x[key] = cut(item, level+1)
		}
	case []any:
		if level > 16 {
			return nil
		}
		for i, item := range x {
			x[i] = cut(item, level+1)
		}
	}
	return v
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

// withBase64 puts back each string a .binpb record stores as bytes
// (base64_values): where the text stood, the string holds a placeholder
// "\x00base64:INDEX:CRC" naming its entry, whose text is prefix +
// base64(data) (the URL-safe alphabet when url_safe). The placeholder moves
// with its value under any edit; one that names no entry, or whose CRC-32
// is not its entry's (copied from another record), is an error.
func withBase64(view any, hints []*omniv1.Base64Value) (any, error) {
	const mark = "\x00base64:"
	switch v := view.(type) {
	case string:
		if !strings.HasPrefix(v, mark) || len(hints) == 0 {
			return v, nil
		}
		parts := strings.Split(v[len(mark):], ":")
		i, err := strconv.Atoi(parts[0])
		if len(parts) != 2 || err != nil || i < 0 || i >= len(hints) {
			return nil, fmt.Errorf("a base64 placeholder names no entry: %q", v)
		}
		h := hints[i]
		if fmt.Sprintf("%08x", crc32.ChecksumIEEE(h.GetData())) != parts[1] {
			return nil, fmt.Errorf("a base64 placeholder's CRC is not its entry's: %q", v)
		}
		enc := base64.StdEncoding
		if h.GetUrlSafe() {
			enc = base64.URLEncoding
		}
		return h.GetPrefix() + enc.EncodeToString(h.GetData()), nil
	case map[string]any:
		for key, item := range v {
			text, err := withBase64(item, hints)
			if err != nil {
				return nil, err
			}
			v[key] = text
		}
	case []any:
		for i, item := range v {
			text, err := withBase64(item, hints)
			if err != nil {
				return nil, err
			}
			v[i] = text
		}
	}
	return view, nil
}
