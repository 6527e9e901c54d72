// A .binpb reader built from the generated stubs and protobuf-go alone, as a
// third party would write one: the varint length, then proto.Unmarshal with
// its defaults. None of the examples' helper code (no inflating, no
// base64_values handling). It prints what it sees, so the test can check that
// a record it cannot read stops it loudly and that nothing is read short.
//
// Output, one line each: "record N ARM" per record (ARM: the payload's
// field name), then "b64 N PATH SEEN TEXT" per base64_values entry, where
// SEEN is "=" and the string the fidelity Struct holds at PATH ("MISSING"
// when it holds none) and TEXT is the standard base64 of the bytes. A record
// it cannot parse: "record N: ERROR" on stderr, exit 3.
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

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
		for _, h := range m.GetBase64Values() {
			fmt.Fprintf(out, "b64\t%d\t%s\t%s\t%s\n", n, h.GetPath(), seen(m, h.GetPath()),
				base64.StdEncoding.EncodeToString(h.GetData()))
		}
	}
}

func fail(out *bufio.Writer, n int, err error) {
	out.Flush()
	fmt.Fprintf(os.Stderr, "record %d: %v\n", n, err)
	os.Exit(3)
}

// seen walks a /payload/fidelity/... JSON Pointer through the fidelity Struct.
func seen(m *omniv1.OmniMessage, path string) string {
	var fidelity *structpb.Struct
	switch p := m.GetPayload().(type) {
	case *omniv1.OmniMessage_Text:
		fidelity = p.Text.GetFidelity()
	case *omniv1.OmniMessage_Thinking:
		fidelity = p.Thinking.GetFidelity()
	case *omniv1.OmniMessage_InlineThinking:
		fidelity = p.InlineThinking.GetFidelity()
	case *omniv1.OmniMessage_InlineData:
		fidelity = p.InlineData.GetFidelity()
	case *omniv1.OmniMessage_ToolCall:
		fidelity = p.ToolCall.GetFidelity()
	}
	const prefix = "/payload/fidelity/"
	if fidelity == nil || !strings.HasPrefix(path, prefix) {
		return "MISSING"
	}
	value := structpb.NewStructValue(fidelity)
	for _, part := range strings.Split(path[len(prefix):], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch {
		case value.GetStructValue() != nil:
			value = value.GetStructValue().GetFields()[part]
		case value.GetListValue() != nil:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(value.GetListValue().GetValues()) {
				return "MISSING"
			}
			value = value.GetListValue().GetValues()[i]
		default:
			return "MISSING"
		}
		if value == nil {
			return "MISSING"
		}
	}
	if s, ok := value.GetKind().(*structpb.Value_StringValue); ok {
		return "=" + s.StringValue
	}
	return "MISSING"
}
