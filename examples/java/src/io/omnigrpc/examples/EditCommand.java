package io.omnigrpc.examples;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import io.omnigrpc.omni.v1.OmniMessage;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;

/**
 * Edits delimited OmniMessages the way Java code does, through the typed builders:
 *
 * <pre>
 * set-fidelity=KEY=JSON   put one fidelity key (only where the payload has fidelity)
 * set-stop-reason=N       set a text's stop_reason to enum number N
 * </pre>
 *
 * Hints (key_orders, raw_values) are passed on untouched, as any relay would.
 */
final class EditCommand {
  static void edit(String[] ops, InputStream in, OutputStream out) throws IOException {
    InputStream buffered = new BufferedInputStream(in);
    OutputStream sink = new BufferedOutputStream(out);
    OmniMessage m;
    while ((m = TraceCommand.readRecord(buffered)) != null) {
      OmniMessage.Builder edited = m.toBuilder();
      for (String op : ops) {
        apply(op, edited);
      }
      edited.build().writeDelimitedTo(sink);
    }
    sink.flush();
  }

  private static void apply(String op, OmniMessage.Builder m) throws IOException {
    int eq = op.indexOf('=');
    String name = eq < 0 ? op : op.substring(0, eq);
    String arg = eq < 0 ? "" : op.substring(eq + 1);
    switch (name) {
      case "set-fidelity" -> {
        int at = arg.indexOf('=');
        if (at < 0) {
          throw new IllegalArgumentException("set-fidelity wants KEY=JSON, got " + arg);
        }
        Value.Builder value = Value.newBuilder();
        JsonFormat.parser().merge(arg.substring(at + 1), value);
        Struct.Builder fidelity = fidelityOf(m);
        if (fidelity != null) {
          fidelity.putFields(arg.substring(0, at), value.build());
        }
      }
      case "set-stop-reason" -> {
        if (m.getPayloadCase() == OmniMessage.PayloadCase.TEXT) {
          m.getTextBuilder().setStopReasonValue(Integer.parseInt(arg));
        }
      }
      default -> throw new IllegalArgumentException("unknown op " + op);
    }
  }

  /** The payload's fidelity builder when it has fidelity, else null. */
  private static Struct.Builder fidelityOf(OmniMessage.Builder m) {
    return switch (m.getPayloadCase()) {
      case TEXT -> m.getText().hasFidelity() ? m.getTextBuilder().getFidelityBuilder() : null;
      case THINKING ->
          m.getThinking().hasFidelity() ? m.getThinkingBuilder().getFidelityBuilder() : null;
      case TOOL_CALL ->
          m.getToolCall().hasFidelity() ? m.getToolCallBuilder().getFidelityBuilder() : null;
      default -> null;
    };
  }

  private EditCommand() {}
}
