package io.omnigrpc.examples;

import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.omnigrpc.omni.v1.AbortRequest;
import io.omnigrpc.omni.v1.AgentServiceGrpc.AgentServiceBlockingStub;
import io.omnigrpc.omni.v1.ApprovalMode;
import io.omnigrpc.omni.v1.ApproveRequest;
import io.omnigrpc.omni.v1.AttachRequest;
import io.omnigrpc.omni.v1.AttachResponse;
import io.omnigrpc.omni.v1.Decision;
import io.omnigrpc.omni.v1.OmniMessage;
import io.omnigrpc.omni.v1.Role;
import io.omnigrpc.omni.v1.RunRequest;
import io.omnigrpc.omni.v1.RunResponse;
import io.omnigrpc.omni.v1.ServerEvent;
import io.omnigrpc.omni.v1.SessionState;
import io.omnigrpc.omni.v1.ToolCall;
import java.util.HashSet;
import java.util.Iterator;
import java.util.Set;

/** Runs a prompt and follows the task, re-attaching from the last event id when the call breaks. */
final class RunCommand {
  static final class Options {
    boolean approve;
    int abortAfter; // call Abort after this many responses (0: never)
    int dropAfter; // cancel the call after this many responses, then Attach
  }

  /** What Run and Attach both stream. */
  private record Update(String eventId, String sessionId, OmniMessage message, ServerEvent event) {
    static Update of(RunResponse r) {
      return new Update(r.getEventId(), r.getSessionId(), r.hasMessage() ? r.getMessage() : null,
          r.hasEvent() ? r.getEvent() : null);
    }

    static Update of(AttachResponse r) {
      return new Update(r.getEventId(), r.getSessionId(), r.hasMessage() ? r.getMessage() : null,
          r.hasEvent() ? r.getEvent() : null);
    }
  }

  private final AgentServiceBlockingStub stub;
  private final Options options;
  private final Set<String> approved = new HashSet<>();
  private String sessionId = "";
  private String lastEventId = "";
  private int received;
  private boolean aborting;
  private boolean streamedText;
  private boolean over; // the task_state IDLE closing the task arrived
  private RuntimeException lost; // why the last call broke

  RunCommand(AgentServiceBlockingStub stub, Options options) {
    this.stub = stub;
    this.options = options;
  }

  void run(String prompt) {
    ApprovalMode mode =
        options.approve || options.abortAfter > 0 ? ApprovalMode.APPROVAL_MODE_ASK : ApprovalMode.APPROVAL_MODE_ALLOW_ALL;
    // snippet:start java-run
    // detach_on_cancel keeps the task alive when this call breaks, so it can be re-attached.
    RunRequest request =
        RunRequest.newBuilder().setPrompt(prompt).setApprovalMode(mode).setDetachOnCancel(true).build();
    Context.CancellableContext call = Context.current().withCancellation();
    Iterator<Update> updates = map(startIn(call, () -> stub.run(request)), Update::of);
    // A Run call ends by itself after the task; its status tells a failed run
    // (the server could not write the trace) from a finished one.
    boolean attached = false;
    int failed = 0;
    int before = received;
    while (!follow(updates, call, attached)) {
      // A break after new events starts the count of attempts again.
      failed = received > before ? 0 : failed + 1;
      if (failed == MAX_ATTEMPTS) {
        throw lost;
      }
      pause(failed);
      before = received;
      System.err.println("[reconnect] attach after " + lastEventId + ": " + lost.getMessage());
      options.dropAfter = 0;
      AttachRequest attach =
          AttachRequest.newBuilder().setSessionId(sessionId).setAfterEventId(lastEventId).build();
      call = Context.current().withCancellation();
      updates = map(startIn(call, () -> stub.attach(attach)), Update::of);
      attached = true;
    }
    // snippet:end java-run
  }

  /**
   * Handles updates until the stream ends (true) or the connection is lost (false); with
   * stopAtIdle (an Attach stream, which stays open across tasks) until the task is over.
   */
  private boolean follow(Iterator<Update> updates, Context.CancellableContext call, boolean stopAtIdle) {
    try {
      while (updates.hasNext()) {
        if (handle(updates.next())) {
          over = true;
          if (!stopAtIdle) {
            continue; // the Run call's status, still to come, says how the run ended
          }
          call.cancel(null);
          return true;
        }
        received++;
        if (options.dropAfter > 0 && received == options.dropAfter) {
          call.cancel(null);
          lost = new IllegalStateException("connection dropped on purpose");
          return false;
        }
        if (options.abortAfter > 0 && received == options.abortAfter) {
          aborting = true;
          // snippet:start java-abort
          boolean wasRunning = stub.abort(AbortRequest.newBuilder()
              .setSessionId(sessionId).setReason("stopped by omni-client").build()).getWasRunning();
          System.err.println("[abort] requested, was running: " + wasRunning);
          // snippet:end java-abort
        }
      }
      return true;
    } catch (StatusRuntimeException e) {
      // After the task end an error is how the run ended, not a lost connection.
      if (resumable(e.getStatus().getCode()) && !sessionId.isEmpty() && !over) {
        lost = e;
        return false;
      }
      throw e;
    }
  }

  /** Re-attaches in a row that bring nothing new before giving up. */
  private static final int MAX_ATTEMPTS = 8;

  /**
   * Tells a broken path from the server's answer. A proxy reports its upstream's death as
   * INTERNAL (nginx resets the stream: RST_STREAM INTERNAL_ERROR), and having no upstream as
   * UNAVAILABLE (502, 503, 504) or UNKNOWN (another HTTP status); the server says UNAVAILABLE
   * while its store is away. Any other code is the server's answer, which a retry would not
   * change. Attach only reads, so retrying a server's own INTERNAL is harmless, and MAX_ATTEMPTS
   * ends a retry that keeps failing.
   */
  static boolean resumable(Status.Code code) {
    return code == Status.Code.UNAVAILABLE || code == Status.Code.INTERNAL || code == Status.Code.UNKNOWN;
  }

  /** Waits before attempt `failed`: not after the first break, then 0.25 s doubling up to 4 s. */
  private static void pause(int failed) {
    if (failed == 0) {
      return;
    }
    try {
      Thread.sleep(Math.min(250L << (failed - 1), 4000L));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting to re-attach", e);
    }
  }

  /** Prints or answers one update; true once the task is over. */
  private boolean handle(Update u) {
    if (sessionId.isEmpty()) {
      System.err.println("[session] " + u.sessionId());
    }
    sessionId = u.sessionId();
    if (!u.eventId().isEmpty()) {
      lastEventId = u.eventId();
    }
    if (u.message() != null) {
      print(u.message());
    } else if (u.event().hasApprovalRequest()) {
      // snippet:start java-approve
      ToolCall toolCall = u.event().getApprovalRequest().getToolCall().getToolCall();
      // Pending requests are re-sent on Attach; answer each call once.
      if (options.approve && !aborting && approved.add(toolCall.getToolCallId())) {
        System.err.println("[approve] " + toolCall.getName() + " " + toolCall.getToolCallId());
        stub.approve(ApproveRequest.newBuilder().setSessionId(sessionId)
            .setToolCallId(toolCall.getToolCallId()).setDecision(Decision.DECISION_ALLOW).build());
      }
      // snippet:end java-approve
    } else if (u.event().hasResyncRequired()) {
      System.err.println("[resync] the event id is gone; GetHistory has the recorded messages");
    } else if (u.event().hasTaskState()) {
      return u.event().getTaskState().getState() == SessionState.SESSION_STATE_IDLE;
    }
    return false;
  }

  /** Streamed text goes to stdout as it arrives; complete messages end the line or are logged. */
  private void print(OmniMessage m) {
    if (m.getOriginCount() > 0) {
      return; // a subagent's message
    }
    switch (m.getPayloadCase()) {
      case PARTIAL_TEXT -> {
        if (m.getPartialText().getRole() == Role.ROLE_ASSISTANT) {
          System.out.print(m.getPartialText().getText());
          System.out.flush();
          streamedText = true;
        }
      }
      case TEXT -> {
        if (m.getText().getRole() == Role.ROLE_ASSISTANT) {
          System.out.println(streamedText ? "" : m.getText().getText());
          streamedText = false;
        }
      }
      case TOOL_CALL -> System.err.println("[tool_call] " + m.getToolCall().getName() + " " + m.getToolCall().getArguments());
      case APPROVAL_DECISION -> System.err.println(
          "[decision] " + m.getApprovalDecision().getDecision() + " " + m.getApprovalDecision().getToolCallId());
      case TOOL_CALL_OUTPUT -> System.err.println("[tool_output] " + m.getToolCallOutput().getOutput());
      case ABORT -> System.err.println("[aborted] " + m.getAbort().getReason());
      default -> {}
    }
  }

  /** Starts a call inside ctx, so cancelling ctx drops just that call. */
  private static <T> T startIn(Context.CancellableContext ctx, java.util.function.Supplier<T> start) {
    Context previous = ctx.attach();
    try {
      return start.get();
    } finally {
      ctx.detach(previous);
    }
  }

  private static <A, B> Iterator<B> map(Iterator<A> it, java.util.function.Function<A, B> f) {
    return new Iterator<>() {
      @Override
      public boolean hasNext() {
        return it.hasNext();
      }

      @Override
      public B next() {
        return f.apply(it.next());
      }
    };
  }
}
