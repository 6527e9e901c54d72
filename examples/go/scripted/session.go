package scripted

import (
	"context"
	"fmt"
	"sync"
	"time"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
)

// entry is one published event: a message or a server event, with its
// sequence number (the event id is "<epoch>-<seq>").
type entry struct {
	seq int64
	msg *omniv1.OmniMessage
	ev  *omniv1.ServerEvent
}

// session keeps everything a session ever published, so Attach can replay
// after any event id (a real server would bound this buffer).
type session struct {
	id      string
	created time.Time

	mu       sync.Mutex
	log      []entry
	wake     chan struct{} // closed and replaced on every change
	running  bool
	cancel   context.CancelFunc
	reason   string
	pending  map[string]pendingApproval
	history  []*omniv1.OmniMessage
	modified time.Time
	tokens   *omniv1.TokenCounts // the session's token totals, carried across runs
}

type pendingApproval struct {
	seq    int64
	answer chan omniv1.Decision
}

func newSession(id string) *session {
	now := time.Now().UTC()
	return &session{id: id, created: now, modified: now, wake: make(chan struct{}),
		pending: map[string]pendingApproval{}, tokens: &omniv1.TokenCounts{}}
}

// publishLocked appends an event and wakes every follower. s.mu is held.
func (s *session) publishLocked(msg *omniv1.OmniMessage, ev *omniv1.ServerEvent) int64 {
	seq := int64(len(s.log) + 1)
	s.log = append(s.log, entry{seq: seq, msg: msg, ev: ev})
	if msg != nil && isRecordable(msg) {
		s.history = append(s.history, msg)
	}
	s.modified = time.Now().UTC()
	close(s.wake)
	s.wake = make(chan struct{})
	return seq
}

func (s *session) publish(msg *omniv1.OmniMessage, ev *omniv1.ServerEvent) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.publishLocked(msg, ev)
}

// follow sends the entries from index `from` on, waiting for new ones while
// a task runs; it returns once the task is over and everything is sent.
func (s *session) follow(ctx context.Context, from int, send func(entry) error) error {
	for {
		s.mu.Lock()
		batch := append([]entry(nil), s.log[from:]...)
		finished, wake := !s.running, s.wake
		s.mu.Unlock()
		for _, e := range batch {
			if err := send(e); err != nil {
				return err
			}
		}
		from += len(batch)
		if finished {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// isRecordable mirrors the trace rule: no partials, nothing from subagents.
func isRecordable(m *omniv1.OmniMessage) bool {
	if len(m.Origin) > 0 {
		return false
	}
	switch m.Payload.(type) {
	case *omniv1.OmniMessage_PartialText, *omniv1.OmniMessage_PartialThinking,
		*omniv1.OmniMessage_PartialToolCall, *omniv1.OmniMessage_PartialToolCallOutput:
		return false
	}
	return true
}

func taskState(state omniv1.SessionState) *omniv1.ServerEvent {
	return &omniv1.ServerEvent{Kind: &omniv1.ServerEvent_TaskState{TaskState: &omniv1.TaskState{State: state}}}
}

// run plays the scripted turn, asking for approval as the mode says.
func (s *session) run(ctx context.Context, t *turn, mode omniv1.ApprovalMode) {
	defer func() {
		s.mu.Lock()
		s.running, s.cancel = false, nil
		s.publishLocked(nil, taskState(omniv1.SessionState_SESSION_STATE_IDLE))
		s.mu.Unlock()
	}()
	s.publish(nil, taskState(omniv1.SessionState_SESSION_STATE_RUNNING))
	if !s.publishAll(ctx, t, t.beforeApproval()) {
		return
	}
	decision := omniv1.Decision_DECISION_ALLOW
	switch mode {
	case omniv1.ApprovalMode_APPROVAL_MODE_DENY_ALL:
		decision = omniv1.Decision_DECISION_DENY
	case omniv1.ApprovalMode_APPROVAL_MODE_ASK:
		var ok bool
		if decision, ok = s.askApproval(ctx, t); !ok {
			s.publish(t.aborted(s.abortReason()), nil)
			return
		}
	}
	if s.publishAll(ctx, t, t.decided(decision)) {
		s.publishAll(ctx, t, t.afterApproval())
	}
}

// publishAll publishes msgs in order; when the task is aborted it publishes
// the final abort message instead and reports false.
func (s *session) publishAll(ctx context.Context, t *turn, msgs []*omniv1.OmniMessage) bool {
	for _, m := range msgs {
		if ctx.Err() != nil {
			s.publish(t.aborted(s.abortReason()), nil)
			return false
		}
		s.publish(m, nil)
	}
	return true
}

func (s *session) askApproval(ctx context.Context, t *turn) (omniv1.Decision, bool) {
	answer := make(chan omniv1.Decision, 1)
	s.mu.Lock()
	call := s.log[len(s.log)-1].msg
	seq := s.publishLocked(nil, &omniv1.ServerEvent{Kind: &omniv1.ServerEvent_ApprovalRequest{
		ApprovalRequest: &omniv1.ApprovalRequest{ToolCall: call}}})
	s.pending[ToolCallID] = pendingApproval{seq: seq, answer: answer}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, ToolCallID)
		s.mu.Unlock()
	}()
	select {
	case d := <-answer:
		return d, true
	case <-ctx.Done():
		return 0, false
	}
}

func (s *session) abortReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == "" {
		return "aborted by user"
	}
	return s.reason
}

// approve answers a pending approval request.
func (s *session) approve(toolCallID string, d omniv1.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pending[toolCallID]
	if !ok {
		return fmt.Errorf("no pending approval for tool call %q", toolCallID)
	}
	delete(s.pending, toolCallID)
	p.answer <- d
	return nil
}
