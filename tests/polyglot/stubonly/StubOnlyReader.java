// A .binpb reader built from the generated stubs and protobuf-java alone, as a
// third party would write one: OmniMessage.parseDelimitedFrom with its
// defaults. None of the examples' helper code (no inflating); it follows
// docs/traces.md for base64_values. Output as tests/polyglot/stubonly/reader.go
// describes: "record N ARM", "b64 N PATH TEXT"; a record it cannot parse
// gives "record N: ERROR" on stderr and exit 3, a placeholder that names no
// entry or the wrong bytes "record N PATH: ERROR" and exit 4.

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.omnigrpc.omni.v1.Base64Value;
import io.omnigrpc.omni.v1.OmniMessage;
import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.TreeMap;
import java.util.zip.CRC32;

public final class StubOnlyReader {
  static final String MARK = "\u0000base64:";

  record Slot(String path, String text) {}

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
      for (Slot s : slots(m)) {
        if (!s.text().startsWith(MARK)) {
          continue;
        }
        String text;
        try {
          text = resolve(s.text(), m.getBase64ValuesList());
        } catch (IllegalArgumentException e) {
          out.flush();
          System.err.println("record " + n + " " + s.path() + ": " + e.getMessage());
          System.exit(4);
          return;
        }
        out.print("b64\t" + n + "\t" + s.path() + "\t" + text + "\n");
      }
    }
    out.flush();
  }

  static String resolve(String placeholder, List<Base64Value> hints) {
    String[] parts = placeholder.substring(MARK.length()).split(":", -1);
    if (parts.length != 2) {
      throw new IllegalArgumentException("malformed placeholder");
    }
    int i;
    try {
      i = Integer.parseInt(parts[0]);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("malformed placeholder");
    }
    if (i < 0 || i >= hints.size()) {
      throw new IllegalArgumentException("placeholder names no entry");
    }
    Base64Value h = hints.get(i);
    byte[] data = h.getData().toByteArray();
    CRC32 crc = new CRC32();
    crc.update(data);
    if (!String.format("%08x", crc.getValue()).equals(parts[1])) {
      throw new IllegalArgumentException("placeholder's CRC is not its entry's");
    }
    Base64.Encoder enc = h.getUrlSafe() ? Base64.getUrlEncoder() : Base64.getEncoder();
    return h.getPrefix() + enc.encodeToString(data);
  }

  static List<Slot> slots(OmniMessage m) {
    List<Slot> out = new ArrayList<>();
    Struct fidelity = null;
    switch (m.getPayloadCase()) {
      case TEXT -> fidelity = m.getText().hasFidelity() ? m.getText().getFidelity() : null;
      case THINKING -> fidelity = m.getThinking().hasFidelity() ? m.getThinking().getFidelity() : null;
      case INLINE_THINKING -> {
        out.add(new Slot("/payload/data", m.getInlineThinking().getData()));
        fidelity = m.getInlineThinking().hasFidelity() ? m.getInlineThinking().getFidelity() : null;
      }
      case INLINE_DATA -> {
        out.add(new Slot("/payload/data", m.getInlineData().getData()));
        fidelity = m.getInlineData().hasFidelity() ? m.getInlineData().getFidelity() : null;
      }
      case TOOL_CALL -> fidelity = m.getToolCall().hasFidelity() ? m.getToolCall().getFidelity() : null;
      case IMAGE_URL -> out.add(new Slot("/payload/image_url", m.getImageUrl().getImageUrl()));
      case TOOL_CALL_OUTPUT -> {
        for (int i = 0; i < m.getToolCallOutput().getImagesCount(); i++) {
          out.add(new Slot("/payload/images/" + i, m.getToolCallOutput().getImages(i)));
        }
      }
      default -> {}
    }
    if (fidelity != null) {
      walk(Value.newBuilder().setStructValue(fidelity).build(), "/payload/fidelity", out);
    }
    return out;
  }

  static void walk(Value v, String path, List<Slot> out) {
    if (v.hasStringValue()) {
      out.add(new Slot(path, v.getStringValue()));
    } else if (v.hasStructValue()) {
      for (var e : new TreeMap<>(v.getStructValue().getFieldsMap()).entrySet()) {
        String token = e.getKey().replace("~", "~0").replace("/", "~1");
        walk(e.getValue(), path + "/" + token, out);
      }
    } else if (v.hasListValue()) {
      for (int i = 0; i < v.getListValue().getValuesCount(); i++) {
        walk(v.getListValue().getValues(i), path + "/" + i, out);
      }
    }
  }
}
