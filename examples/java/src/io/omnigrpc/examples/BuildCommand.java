package io.omnigrpc.examples;

import com.google.protobuf.ListValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.omnigrpc.omni.v1.Abort;
import io.omnigrpc.omni.v1.OmniMessage;
import io.omnigrpc.omni.v1.Role;
import io.omnigrpc.omni.v1.StopReason;
import io.omnigrpc.omni.v1.Text;
import io.omnigrpc.omni.v1.TokenCounts;
import io.omnigrpc.omni.v1.TokenUsage;
import io.omnigrpc.omni.v1.ToolDefinition;
import io.omnigrpc.omni.v1.ToolListReady;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;

/** Writes messages the way a Java producer builds them: typed fields only, no envelope type, no hints. */
final class BuildCommand {
  static void write(OutputStream out) throws IOException {
    String ts = "2026-01-02T03:04:05.678Z";
    Struct fidelity =
        Struct.newBuilder()
            .putFields("zeta", Value.newBuilder().setNumberValue(1).build())
            .putFields(
                "alpha",
                Value.newBuilder()
                    .setListValue(
                        ListValue.newBuilder()
                            .addValues(Value.newBuilder().setNumberValue(1.5))
                            .addValues(Value.newBuilder().setStringValue("x")))
                    .build())
            .build();
    OmniMessage[] messages = {
      OmniMessage.newBuilder()
          .setTimestamp(ts)
          .setText(
              Text.newBuilder()
                  .setRole(Role.ROLE_ASSISTANT)
                  .setText("built in Java")
                  .setStopReason(StopReason.STOP_REASON_COMPLETED)
                  .setFidelity(fidelity))
          .build(),
      OmniMessage.newBuilder()
          .setTimestamp(ts)
          .setToolListReady(
              ToolListReady.newBuilder()
                  .addTools(
                      ToolDefinition.newBuilder()
                          .setName("ls")
                          .setDescription("list")
                          .setParameters("{\"type\":\"object\",\"properties\":{}}")))
          .build(),
      OmniMessage.newBuilder()
          .setTimestamp(ts)
          .addOrigin("child")
          .setTokenUsage(
              TokenUsage.newBuilder().setRequest(TokenCounts.newBuilder().setOutput(3).setTotal(3)))
          .build(),
      OmniMessage.newBuilder().setTimestamp(ts).setAbort(Abort.getDefaultInstance()).build(),
    };
    OutputStream sink = new BufferedOutputStream(out);
    for (OmniMessage m : messages) {
      m.writeDelimitedTo(sink);
    }
    sink.flush();
  }

  private BuildCommand() {}
}
