// A .binpb reader built from the generated stubs and protobuf-go alone, as a
// third party would write one: the varint length, then proto.Unmarshal with
// its defaults. None of the examples' helper code (no inflating); it follows
// docs/traces.md for base64_values and nothing else. It prints what it sees,
// so the test can check that a record it cannot read stops it loudly and
// that nothing is read short.
//
// Output, one line each: "record N ARM" per record (ARM: the payload's
// field name), then "b64 N PATH TEXT" for each base64 placeholder (a string
// "\x00base64:INDEX:CRC") it finds in the typed fields that may hold one and
// in the fidelity Struct, where PATH is the JSON Pointer it stands at and
// TEXT is prefix + base64(data) of the entry it names. A record it cannot
// parse: "record N: ERROR" on stderr, exit 3; a placeholder that names no
// entry or the wrong bytes: "record N PATH: ERROR" on stderr, exit 4.
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const mark = "\x00base64:"

func main() {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for n := 1; ; n++ {
		size, err := binary.ReadUvarint(in)
		if err == io.EOF {
			return
		}
		if err != nil {
			fail(out, n, err)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(in, body); err != nil {
			fail(out, n, err)
		}
		m := &omniv1.OmniMessage{}
		if err := proto.Unmarshal(body, m); err != nil {
			fail(out, n, err)
		}
		arm := "none"
		oneof := m.ProtoReflect().Descriptor().Oneofs().ByName("payload")
		if fd := m.ProtoReflect().WhichOneof(oneof); fd != nil {
			arm = string(fd.Name())
		}
		fmt.Fprintf(out, "record\t%d\t%s\n", n, arm)
		for _, s := range slots(m) {
			if !strings.HasPrefix(s.text, mark) {
				continue
			}
			text, err := resolve(s.text, m.GetBase64Values())
			if err != nil {
				out.Flush()
				fmt.Fprintf(os.Stderr, "record %d %s: %v\n", n, s.path, err)
				os.Exit(4)
			}
			fmt.Fprintf(out, "b64\t%d\t%s\t%s\n", n, s.path, text)
		}
	}
}

func fail(out *bufio.Writer, n int, err error) {
	out.Flush()
	fmt.Fprintf(os.Stderr, "record %d: %v\n", n, err)
	os.Exit(3)
}

// resolve gives the text a placeholder stands for.
func resolve(placeholder string, hints []*omniv1.Base64Value) (string, error) {
	parts := strings.Split(placeholder[len(mark):], ":")
	if len(parts) != 2 {
		return "", fmt.Errorf("malformed placeholder")
	}
	i, err := strconv.Atoi(parts[0])
	if err != nil || i < 0 || i >= len(hints) {
		return "", fmt.Errorf("placeholder names no entry")
	}
	h := hints[i]
	if fmt.Sprintf("%08x", crc32.ChecksumIEEE(h.GetData())) != parts[1] {
		return "", fmt.Errorf("placeholder's CRC is not its entry's")
	}
	enc := base64.StdEncoding
	if h.GetUrlSafe() {
		enc = base64.URLEncoding
	}
	return h.GetPrefix() + enc.EncodeToString(h.GetData()), nil
}

type slot struct{ path, text string }

// slots lists the strings a placeholder may stand in, with their paths.
func slots(m *omniv1.OmniMessage) []slot {
	var out []slot
	var fidelity *structpb.Struct
	switch p := m.GetPayload().(type) {
	case *omniv1.OmniMessage_Text:
		fidelity = p.Text.GetFidelity()
	case *omniv1.OmniMessage_Thinking:
		fidelity = p.Thinking.GetFidelity()
	case *omniv1.OmniMessage_InlineThinking:
		out = append(out, slot{"/payload/data", p.InlineThinking.GetData()})
		fidelity = p.InlineThinking.GetFidelity()
	case *omniv1.OmniMessage_InlineData:
		out = append(out, slot{"/payload/data", p.InlineData.GetData()})
		fidelity = p.InlineData.GetFidelity()
	case *omniv1.OmniMessage_ToolCall:
		fidelity = p.ToolCall.GetFidelity()
	case *omniv1.OmniMessage_ImageUrl:
		out = append(out, slot{"/payload/image_url", p.ImageUrl.GetImageUrl()})
	case *omniv1.OmniMessage_ToolCallOutput:
		for i, image := range p.ToolCallOutput.GetImages() {
			out = append(out, slot{fmt.Sprintf("/payload/images/%d", i), image})
		}
	}
	if fidelity != nil {
		out = walk(structpb.NewStructValue(fidelity), "/payload/fidelity", out)
	}
	return out
}

func walk(v *structpb.Value, path string, out []slot) []slot {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		out = append(out, slot{path, k.StringValue})
	case *structpb.Value_StructValue:
		keys := make([]string, 0, len(k.StructValue.GetFields()))
		for key := range k.StructValue.GetFields() {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			token := strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
			out = walk(k.StructValue.GetFields()[key], path+"/"+token, out)
		}
	case *structpb.Value_ListValue:
		for i, item := range k.ListValue.GetValues() {
			out = walk(item, fmt.Sprintf("%s/%d", path, i), out)
		}
	}
	return out
}
