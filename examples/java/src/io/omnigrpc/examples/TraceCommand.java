package io.omnigrpc.examples;

import com.google.gson.Gson;
import com.google.protobuf.Struct;
import com.google.protobuf.util.JsonFormat;
import io.omnigrpc.omni.v1.OmniMessage;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.zip.InflaterInputStream;

/** Reads varint-delimited .binpb traces (the format `omni-grpc convert` writes). */
final class TraceCommand {
  private static final Gson GSON = new Gson();
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
   * compressed (zlib_record alone: the zlib stream of the record's bytes); it is inflated and
   * parsed as the record.
   */
  // snippet:start java-record
  static OmniMessage readRecord(InputStream in) throws IOException {
    OmniMessage m = OmniMessage.parseDelimitedFrom(in);
    if (m == null || m.getZlibRecord().isEmpty()) {
      return m;
    }
    try (InputStream zlib = new InflaterInputStream(m.getZlibRecord().newInput())) {
      byte[] record = zlib.readNBytes(MAX_RECORD + 1);
      if (record.length > MAX_RECORD) {
        throw new IOException("zlib_record inflates past " + MAX_RECORD + " bytes");
      }
      return OmniMessage.parseFrom(record);
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
      line.append(" fidelity=").append(JSON.print(fidelity));
    }
    return line.toString();
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
