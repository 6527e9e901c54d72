// A .binpb reader built from the generated stubs and protobuf-java alone, as a
// third party would write one: OmniMessage.parseDelimitedFrom with its
// defaults. None of the examples' helper code (no inflating, no
// base64_values handling). Output as tests/polyglot/stubonly/reader.go
// describes: "record N ARM", "b64 N PATH SEEN TEXT"; a record it cannot parse
// gives "record N: ERROR" on stderr and exit 3.

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.omnigrpc.omni.v1.Base64Value;
import io.omnigrpc.omni.v1.OmniMessage;
import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Locale;

public final class StubOnlyReader {
  public static void main(String[] args) {
    InputStream in = new BufferedInputStream(System.in);
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    for (int n = 1; ; n++) {
      OmniMessage m;
      try {
        m = OmniMessage.parseDelimitedFrom(in);
      } catch (IOException e) {
        out.flush();
        System.err.println("record " + n + ": " + e);
        System.exit(3);
        return;
      }
      if (m == null) {
        break;
      }
      String arm =
          m.getPayloadCase() == OmniMessage.PayloadCase.PAYLOAD_NOT_SET
              ? "none"
              : m.getPayloadCase().name().toLowerCase(Locale.ROOT);
      out.print("record\t" + n + "\t" + arm + "\n");
      for (Base64Value h : m.getBase64ValuesList()) {
        String text = Base64.getEncoder().encodeToString(h.getData().toByteArray());
        out.print("b64\t" + n + "\t" + h.getPath() + "\t" + seen(m, h.getPath()) + "\t" + text + "\n");
      }
    }
    out.flush();
  }

  // Walks a /payload/fidelity/... JSON Pointer through the fidelity Struct.
  static String seen(OmniMessage m, String path) {
    Struct fidelity;
    switch (m.getPayloadCase()) {
      case TEXT -> fidelity = m.getText().hasFidelity() ? m.getText().getFidelity() : null;
      case THINKING -> fidelity = m.getThinking().hasFidelity() ? m.getThinking().getFidelity() : null;
      case INLINE_THINKING ->
          fidelity = m.getInlineThinking().hasFidelity() ? m.getInlineThinking().getFidelity() : null;
      case INLINE_DATA -> fidelity = m.getInlineData().hasFidelity() ? m.getInlineData().getFidelity() : null;
      case TOOL_CALL -> fidelity = m.getToolCall().hasFidelity() ? m.getToolCall().getFidelity() : null;
      default -> fidelity = null;
    }
    String prefix = "/payload/fidelity/";
    if (fidelity == null || !path.startsWith(prefix)) {
      return "MISSING";
    }
    Value value = Value.newBuilder().setStructValue(fidelity).build();
    for (String raw : path.substring(prefix.length()).split("/", -1)) {
      String part = raw.replace("~1", "/").replace("~0", "~");
      if (value.hasStructValue()) {
        if (!value.getStructValue().containsFields(part)) {
          return "MISSING";
        }
        value = value.getStructValue().getFieldsOrThrow(part);
      } else if (value.hasListValue()) {
        int i;
        try {
          i = Integer.parseInt(part);
        } catch (NumberFormatException e) {
          return "MISSING";
        }
        if (i < 0 || i >= value.getListValue().getValuesCount()) {
          return "MISSING";
        }
        value = value.getListValue().getValues(i);
      } else {
        return "MISSING";
      }
    }
    return value.hasStringValue() ? "=" + value.getStringValue() : "MISSING";
  }
}
