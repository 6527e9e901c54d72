package io.omnigrpc.examples;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.Struct;
import com.google.protobuf.util.JsonFormat;
import io.omnigrpc.omni.v1.Base64Value;
import io.omnigrpc.omni.v1.OmniMessage;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.zip.CRC32;
import java.util.List;
import java.util.Locale;
import java.util.zip.InflaterInputStream;

/** Reads varint-delimited .binpb traces (the format `omni-grpc convert` writes). */
final class TraceCommand {
  private static final Gson GSON = new Gson();
  // The Struct's nulls are values: keep them.
  private static final Gson VIEW = new GsonBuilder().serializeNulls().create();
  private static final JsonFormat.Printer JSON = JsonFormat.printer().omittingInsignificantWhitespace();

  /** One line per message: number, timestamp, payload kind, then text and fidelity when present. */
  static void print(Path path, PrintStream out) throws IOException {
    // snippet:start java-trace
    try (InputStream in = new BufferedInputStream(Files.newInputStream(path))) {
      OmniMessage m;
      for (int n = 1; (m = readRecord(in)) != null; n++) {
        out.println("#" + n + " " + m.getTimestamp() + " " + describe(m));
      }
    }
    // snippet:end java-trace
  }

  /** A record's size limit, as omni-grpc reads them: inflating stops past it. */
  private static final int MAX_RECORD = 64 << 20;

  /**
   * The next record of a .binpb stream, or null at its end. A large record may be stored
   * compressed: a 0x00 byte then the zlib stream of the record's bytes (records of tool
   * definitions, by default), or zlib_record alone (written with --compress). It is inflated and
   * parsed as the record.
   */
  // snippet:start java-record
  static OmniMessage readRecord(InputStream in) throws IOException {
    int first = in.read();
    if (first == -1) {
      return null;
    }
    int size = CodedInputStream.readRawVarint32(first, in);
    if (size < 0 || size > MAX_RECORD) {
      throw new IOException("record length " + size + " exceeds " + MAX_RECORD + " bytes");
    }
    byte[] body = in.readNBytes(size);
    if (body.length < size) {
      throw new EOFException("truncated record: " + size + " bytes announced, " + body.length);
    }
    if (size > 0 && body[0] == 0) { // field number 0: no message starts so
      body = inflate(new ByteArrayInputStream(body, 1, size - 1));
    }
    OmniMessage m = OmniMessage.parseFrom(body);
    if (m.getZlibRecord().isEmpty()) {
      return m;
    }
    return OmniMessage.parseFrom(inflate(m.getZlibRecord().newInput()));
  }

  private static byte[] inflate(InputStream packed) throws IOException {
    try (InputStream zlib = new InflaterInputStream(packed)) {
      byte[] record = zlib.readNBytes(MAX_RECORD + 1);
      if (record.length > MAX_RECORD) {
        throw new IOException("a compressed record inflates past " + MAX_RECORD + " bytes");
      }
      return record;
    }
  }
  // snippet:end java-record

  private static String describe(OmniMessage m) throws IOException {
    StringBuilder line = new StringBuilder(m.getPayloadCase().name().toLowerCase(Locale.ROOT));
    Struct fidelity = null;
    switch (m.getPayloadCase()) {
      case TEXT -> {
        line.append(" text=").append(GSON.toJson(m.getText().getText()));
        fidelity = m.getText().hasFidelity() ? m.getText().getFidelity() : null;
      }
      case THINKING -> fidelity = m.getThinking().hasFidelity() ? m.getThinking().getFidelity() : null;
      case TOOL_CALL -> {
        line.append(" name=").append(GSON.toJson(m.getToolCall().getName()));
        fidelity = m.getToolCall().hasFidelity() ? m.getToolCall().getFidelity() : null;
      }
      case INLINE_DATA -> fidelity = m.getInlineData().hasFidelity() ? m.getInlineData().getFidelity() : null;
      case INLINE_THINKING ->
          fidelity = m.getInlineThinking().hasFidelity() ? m.getInlineThinking().getFidelity() : null;
      case UNKNOWN -> line.append(" type=").append(GSON.toJson(m.getUnknown().getType()));
      default -> {}
    }
    if (fidelity != null) {
      JsonElement view = JsonParser.parseString(JSON.print(fidelity));
      if (fidelity.containsFields(ELIDED)) {
        view = fromExactText(m, view.getAsJsonObject());
      }
      line.append(" fidelity=").append(VIEW.toJson(withBase64(view, m.getBase64ValuesList())));
    }
    return line.toString();
  }

  /** A default .binpb record stores a fidelity_json once: its Struct holds only this key (true). */
  static final String ELIDED = "\u0000fidelity_json";

  /**
   * Builds the Struct view from fidelity_json (values nested deeper than the view's 16 levels read
   * as null, as in the Struct), with the keys a program set beside the marker over it.
   */
  static JsonElement fromExactText(OmniMessage m, JsonObject beside) throws IOException {
    String text =
        switch (m.getPayloadCase()) {
          case TEXT -> m.getText().getFidelityJson();
          case THINKING -> m.getThinking().getFidelityJson();
          case TOOL_CALL -> m.getToolCall().getFidelityJson();
          case INLINE_DATA -> m.getInlineData().getFidelityJson();
          case INLINE_THINKING -> m.getInlineThinking().getFidelityJson();
          default -> "";
        };
    if (text.isEmpty()) {
      throw new IOException("fidelity's Struct was left out for fidelity_json, which is empty");
    }
    JsonObject view = cut(JsonParser.parseString(text), 1).getAsJsonObject();
    for (var e : beside.entrySet()) {
      if (!e.getKey().equals(ELIDED)) {
        view.add(e.getKey(), e.getValue());
      }
    }
    return view;
  }

  private static JsonElement cut(JsonElement v, int level) {
    if (v.isJsonObject() || v.isJsonArray()) {
      if (level > 16) {
        return JsonNull.INSTANCE;
      }
      if (v.isJsonObject()) {
        for (var e : v.getAsJsonObject().entrySet()) {
          e.setValue(cut(e.getValue(), level + 1));
        }
      } else {
        JsonArray items = v.getAsJsonArray();
        for (int i = 0; i < items.size(); i++) {
          items.set(i, cut(items.get(i), level + 1));
        }
      }
    }
    return v;
  }

  /**
   * Puts back each string a .binpb record stores as bytes (base64_values): where the text stood,
   * the string holds a placeholder "\u0000base64:INDEX:CRC" naming its entry, whose text is
   * prefix + base64(data) (the URL-safe alphabet when url_safe). The placeholder moves with its
   * value under any edit; one that names no entry, or whose CRC-32 is not its entry's (copied
   * from another record), is an error.
   */
  static JsonElement withBase64(JsonElement view, List<Base64Value> hints) throws IOException {
    String mark = "\u0000base64:";
    if (view.isJsonPrimitive() && view.getAsJsonPrimitive().isString()) {
      String s = view.getAsString();
      if (!s.startsWith(mark) || hints.isEmpty()) {
        return view;
      }
      String[] parts = s.substring(mark.length()).split(":", -1);
      if (parts.length != 2 || !parts[0].matches("0|[1-9][0-9]{0,8}")
          || Integer.parseInt(parts[0]) >= hints.size()) {
        throw new IOException("a base64 placeholder names no entry: " + GSON.toJson(s));
      }
      Base64Value h = hints.get(Integer.parseInt(parts[0]));
      CRC32 crc = new CRC32();
      crc.update(h.getData().toByteArray());
      if (!String.format("%08x", crc.getValue()).equals(parts[1])) {
        throw new IOException("a base64 placeholder's CRC is not its entry's: " + GSON.toJson(s));
      }
      Base64.Encoder enc = h.getUrlSafe() ? Base64.getUrlEncoder() : Base64.getEncoder();
      return new JsonPrimitive(h.getPrefix() + enc.encodeToString(h.getData().toByteArray()));
    }
    if (view.isJsonObject()) {
      for (var e : view.getAsJsonObject().entrySet()) {
        e.setValue(withBase64(e.getValue(), hints));
      }
    } else if (view.isJsonArray()) {
      JsonArray items = view.getAsJsonArray();
      for (int i = 0; i < items.size(); i++) {
        items.set(i, withBase64(items.get(i), hints));
      }
    }
    return view;
  }

  /** Parses every delimited OmniMessage on in and writes it back, re-serialized from the typed message. */
  static void echo(InputStream in, OutputStream out) throws IOException {
    InputStream buffered = new BufferedInputStream(in);
    OutputStream sink = new BufferedOutputStream(out);
    OmniMessage m;
    while ((m = readRecord(buffered)) != null) {
      m.writeDelimitedTo(sink);
    }
    sink.flush();
  }

  private TraceCommand() {}
}
