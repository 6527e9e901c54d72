package io.omnigrpc.examples;

import io.grpc.ManagedChannel;
import io.grpc.netty.NettyChannelBuilder;
import io.omnigrpc.omni.v1.AgentServiceGrpc;
import java.util.concurrent.TimeUnit;

/**
 * How a Java service uses the omni-grpc stubs.
 *
 * <pre>
 * OmniClient run [--addr HOST:PORT] [--approve] [--abort-after N] [--drop-after N] PROMPT
 * OmniClient trace FILE.binpb   # print a trace written by `omni-grpc convert`
 * OmniClient echo               # delimited OmniMessages: stdin -> parse -> stdout
 * OmniClient build              # messages built from typed fields only, delimited, on stdout
 * OmniClient edit OP...         # delimited OmniMessages: stdin -> typed edits -> stdout
 * </pre>
 *
 * run prints the streamed assistant text on stdout and what happens around it
 * (session, tool calls, approvals, reconnects, abort) on stderr.
 */
public final class OmniClient {
  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      usage();
    }
    switch (args[0]) {
      case "run" -> run(args);
      case "trace" -> {
        if (args.length != 2) {
          usage();
        }
        TraceCommand.print(java.nio.file.Path.of(args[1]), System.out);
      }
      case "echo" -> TraceCommand.echo(System.in, System.out);
      case "build" -> BuildCommand.write(System.out);
      case "edit" ->
          EditCommand.edit(java.util.Arrays.copyOfRange(args, 1, args.length), System.in, System.out);
      default -> usage();
    }
  }

  private static void run(String[] args) throws Exception {
    String addr = "127.0.0.1:50051";
    String prompt = null;
    RunCommand.Options options = new RunCommand.Options();
    for (int i = 1; i < args.length; i++) {
      switch (args[i]) {
        case "--addr" -> addr = args[++i];
        case "--approve" -> options.approve = true;
        case "--abort-after" -> options.abortAfter = Integer.parseInt(args[++i]);
        case "--drop-after" -> options.dropAfter = Integer.parseInt(args[++i]);
        default -> prompt = args[i];
      }
    }
    if (prompt == null) {
      usage();
    }
    int colon = addr.lastIndexOf(':');
    // snippet:start java-channel
    // Debian ships grpc-netty only (no okhttp); plaintext is for loopback.
    ManagedChannel channel =
        NettyChannelBuilder.forAddress(addr.substring(0, colon), Integer.parseInt(addr.substring(colon + 1)))
            .usePlaintext()
            // The server's message size limit (2 x the 64 MiB record limit + 1 MiB).
            .maxInboundMessageSize(2 * 64 * 1024 * 1024 + 1024 * 1024)
            .build();
    try {
      new RunCommand(AgentServiceGrpc.newBlockingStub(channel), options).run(prompt);
    // snippet:end java-channel
    } catch (io.grpc.StatusRuntimeException e) {
      // The call failed, or the run did (its status after the task end): say so, exit 1.
      System.err.println("omni-client: " + e.getStatus().getCode() + ": " + e.getStatus().getDescription());
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      System.exit(1);
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  private static void usage() {
    System.err.println("usage: OmniClient run [options] PROMPT | trace FILE | echo | build");
    System.exit(2);
  }

  private OmniClient() {}
}
