package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// response is what Run and Attach both stream.
type response interface {
	GetEventId() string
	GetSessionId() string
	GetMessage() *omniv1.OmniMessage
	GetEvent() *omniv1.ServerEvent
}

type runner struct {
	client     omniv1.AgentServiceClient
	out, log   io.Writer
	approve    bool
	abortAfter int  // call Abort after this many responses (0: never)
	dropAfter  int  // cancel the stream after this many responses, then Attach
	printIDs   bool // print each response's event id instead of the text

	seen, lastEventID, sessionID string
	received                     int
	approved                     map[string]bool
	aborting                     bool
	over                         bool // the task_state IDLE closing the task arrived
}

// run starts a task and follows it to the end, re-attaching (from the last
// event id) when the stream breaks.
func (r *runner) run(ctx context.Context, prompt string) error {
	r.approved = map[string]bool{}
	mode := omniv1.ApprovalMode_APPROVAL_MODE_ALLOW_ALL
	if r.approve || r.abortAfter > 0 {
		mode = omniv1.ApprovalMode_APPROVAL_MODE_ASK
	}
	// snippet:start go-run
	callCtx, drop := context.WithCancel(ctx)
	defer drop()
	// detach_on_cancel keeps the task alive when this call breaks, so it can be re-attached.
	stream, err := r.client.Run(callCtx, &omniv1.RunRequest{
		Prompt: prompt, ApprovalMode: mode, DetachOnCancel: true,
	})
	if err != nil {
		return err
	}
	// A Run call ends by itself after the task; its status tells a failed run
	// (the server could not write the trace) from a finished one.
	err = r.follow(ctx, func() (response, error) { return stream.Recv() }, drop, false)
	// Re-attach only to a task still going: after its task_state IDLE, an
	// error is how the run ended (UNAVAILABLE too: a read-only data dir).
	for failed := 0; !r.over && resumable(err); failed++ {
		if r.sessionID == "" || failed == maxAttempts {
			return err
		}
		if perr := pause(ctx, failed); perr != nil {
			return perr
		}
		fmt.Fprintf(r.log, "[reconnect] attach after %s: %v\n", r.lastEventID, err)
		r.dropAfter = 0
		callCtx, drop = context.WithCancel(ctx)
		defer drop()
		attach, aerr := r.client.Attach(callCtx, &omniv1.AttachRequest{
			SessionId: r.sessionID, AfterEventId: r.lastEventID,
		})
		if aerr != nil {
			err = aerr
			continue
		}
		before := r.received
		err = r.follow(ctx, func() (response, error) { return attach.Recv() }, drop, true)
		if r.received > before {
			failed = -1 // it got further: a later break starts the count again
		}
	}
	// snippet:end go-run
	return err
}

var errDropped = errors.New("connection dropped on purpose")

// maxAttempts bounds the re-attaches in a row that bring nothing new.
const maxAttempts = 8

// resumable tells a broken path from the server's answer. A proxy reports
// its upstream's death as INTERNAL (nginx resets the stream: RST_STREAM
// INTERNAL_ERROR), and having no upstream as UNAVAILABLE (502, 503, 504) or
// UNKNOWN (another HTTP status); the server says UNAVAILABLE while its store
// is away. Any other code is the server's answer, which a retry would not
// change. Attach only reads, so retrying a server's own INTERNAL is harmless,
// and maxAttempts ends a retry that keeps failing.
func resumable(err error) bool {
	if errors.Is(err, errDropped) {
		return true
	}
	s, ok := status.FromError(err)
	if !ok || err == nil {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// pause waits before the next attempt: not at all after the first break,
// then 0.25 s doubling up to 4 s, so a replica restarting is not flooded.
func pause(ctx context.Context, failed int) error {
	if failed == 0 {
		return nil
	}
	wait := 250 * time.Millisecond << (failed - 1)
	if wait > 4*time.Second {
		wait = 4 * time.Second
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// follow handles responses until the stream ends, or (stopAtIdle, for an
// Attach stream, which stays open across tasks) until the task is over.
func (r *runner) follow(ctx context.Context, recv func() (response, error), drop context.CancelFunc, stopAtIdle bool) error {
	for {
		resp, err := recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		idle, err := r.handle(ctx, resp)
		if err != nil || (idle && stopAtIdle) {
			return err
		}
		if idle {
			r.over = true
			continue // the Run call's status, still to come, says how the run ended
		}
		r.received++
		if r.dropAfter > 0 && r.received == r.dropAfter {
			drop()
			return errDropped
		}
		if r.abortAfter > 0 && r.received == r.abortAfter {
			r.aborting = true
			// snippet:start go-abort
			res, err := r.client.Abort(ctx, &omniv1.AbortRequest{SessionId: r.sessionID, Reason: "stopped by omni-client"})
			if err != nil {
				return err
			}
			fmt.Fprintf(r.log, "[abort] requested, was running: %v\n", res.WasRunning)
			// snippet:end go-abort
		}
	}
}

// handle prints or answers one response; it reports true once the task is over.
func (r *runner) handle(ctx context.Context, resp response) (bool, error) {
	if r.sessionID == "" {
		fmt.Fprintf(r.log, "[session] %s\n", resp.GetSessionId())
	}
	r.sessionID = resp.GetSessionId()
	if id := resp.GetEventId(); id != "" {
		r.lastEventID = id
	}
	if msg := resp.GetMessage(); msg != nil {
		if r.printIDs {
			fmt.Fprintf(r.out, "%s message\n", resp.GetEventId())
		} else {
			r.print(msg)
		}
		return false, nil
	}
	if r.printIDs {
		fmt.Fprintf(r.out, "%s event\n", resp.GetEventId())
	}
	ev := resp.GetEvent()
	switch {
	case ev.GetApprovalRequest() != nil:
		// snippet:start go-approve
		call := ev.GetApprovalRequest().GetToolCall().GetToolCall()
		if !r.approve || r.aborting || r.approved[call.GetToolCallId()] {
			return false, nil
		}
		// Pending requests are re-sent on Attach; answer each call once.
		r.approved[call.GetToolCallId()] = true
		fmt.Fprintf(r.log, "[approve] %s %s\n", call.GetName(), call.GetToolCallId())
		_, err := r.client.Approve(ctx, &omniv1.ApproveRequest{
			SessionId: r.sessionID, ToolCallId: call.GetToolCallId(), Decision: omniv1.Decision_DECISION_ALLOW,
		})
		return false, err
		// snippet:end go-approve
	case ev.GetResyncRequired() != nil:
		fmt.Fprintln(r.log, "[resync] the event id is gone; GetHistory has the recorded messages")
	case ev.GetTaskState() != nil:
		return ev.GetTaskState().GetState() == omniv1.SessionState_SESSION_STATE_IDLE, nil
	}
	return false, nil
}

// print writes streamed text as it arrives; complete messages from the main
// session (no origin) end the line or are logged.
func (r *runner) print(msg *omniv1.OmniMessage) {
	if len(msg.GetOrigin()) > 0 {
		return
	}
	switch p := msg.Payload.(type) {
	case *omniv1.OmniMessage_PartialText:
		if p.PartialText.GetRole() == omniv1.Role_ROLE_ASSISTANT {
			fmt.Fprint(r.out, p.PartialText.GetText())
			r.seen += p.PartialText.GetText()
		}
	case *omniv1.OmniMessage_Text:
		if p.Text.GetRole() != omniv1.Role_ROLE_ASSISTANT {
			return
		}
		if r.seen == "" { // an engine that does not stream partials
			fmt.Fprint(r.out, p.Text.GetText())
		}
		fmt.Fprintln(r.out)
		r.seen = ""
	case *omniv1.OmniMessage_ToolCall:
		fmt.Fprintf(r.log, "[tool_call] %s %s\n", p.ToolCall.GetName(), p.ToolCall.GetArguments())
	case *omniv1.OmniMessage_ApprovalDecision:
		fmt.Fprintf(r.log, "[decision] %s %s\n", p.ApprovalDecision.GetDecision(), p.ApprovalDecision.GetToolCallId())
	case *omniv1.OmniMessage_ToolCallOutput:
		fmt.Fprintf(r.log, "[tool_output] %s\n", p.ToolCallOutput.GetOutput())
	case *omniv1.OmniMessage_Abort:
		fmt.Fprintf(r.log, "[aborted] %s\n", p.Abort.GetReason())
	}
}
