// A Java program that knows omni-grpc only as the Maven artifact
// io.omnigrpc:omni-grpc-stubs. Prints one line: the session, the payload
// kinds streamed, the session ids listed.
package example;

import io.grpc.ManagedChannel;
import io.grpc.netty.NettyChannelBuilder;
import io.omnigrpc.omni.v1.AgentServiceGrpc;
import io.omnigrpc.omni.v1.ApprovalMode;
import io.omnigrpc.omni.v1.ListSessionsRequest;
import io.omnigrpc.omni.v1.RunRequest;
import io.omnigrpc.omni.v1.RunResponse;
import io.omnigrpc.omni.v1.SessionInfo;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;

public final class Main {
  public static void main(String[] args) throws Exception {
    String[] hostPort = args[0].split(":");
    ManagedChannel channel =
        NettyChannelBuilder.forAddress(hostPort[0], Integer.parseInt(hostPort[1])).usePlaintext().build();
    try {
      AgentServiceGrpc.AgentServiceBlockingStub stub =
          AgentServiceGrpc.newBlockingStub(channel).withDeadlineAfter(60, TimeUnit.SECONDS);
      RunRequest request =
          RunRequest.newBuilder().setPrompt("hi from java").setApprovalMode(ApprovalMode.APPROVAL_MODE_ALLOW_ALL).build();
      String session = "";
      List<String> kinds = new ArrayList<>();
      for (Iterator<RunResponse> it = stub.run(request); it.hasNext(); ) {
        RunResponse response = it.next();
        session = response.getSessionId();
        kinds.add(response.hasMessage()
            ? response.getMessage().getPayloadCase().name()
            : "@" + response.getEvent().getKindCase().name());
      }
      List<String> ids = new ArrayList<>();
      for (SessionInfo info : stub.listSessions(ListSessionsRequest.getDefaultInstance()).getSessionsList()) {
        ids.add(info.getSessionId());
      }
      System.out.println("session=" + session + " kinds=" + String.join(",", kinds) + " listed=" + String.join(",", ids));
    } finally {
      channel.shutdownNow();
    }
  }
}
