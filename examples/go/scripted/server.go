package scripted

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Server implements omni.v1.AgentService over scripted sessions.
type Server struct {
	omniv1.UnimplementedAgentServiceServer

	epoch    string
	mu       sync.Mutex
	sessions map[string]*session
	order    []string
}

// NewServer returns a server with a fresh event-id epoch.
func NewServer() *Server {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &Server{epoch: hex.EncodeToString(b), sessions: map[string]*session{}}
}

// Register adds the service to a grpc.Server.
func (s *Server) Register(g *grpc.Server) { omniv1.RegisterAgentServiceServer(g, s) }

func (s *Server) eventID(seq int64) string { return fmt.Sprintf("%s-%d", s.epoch, seq) }

func (s *Server) lookup(id string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess, ok := s.sessions[id]; ok {
		return sess, nil
	}
	return nil, status.Errorf(codes.NotFound, "session %q not found", id)
}

func (s *Server) create() *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := fmt.Sprintf("session-go-%d", len(s.order)+1)
	sess := newSession(id)
	s.sessions[id] = sess
	s.order = append(s.order, id)
	return sess
}

// Run starts the scripted turn and streams it until the task ends.
func (s *Server) Run(req *omniv1.RunRequest, stream omniv1.AgentService_RunServer) error {
	prompt := promptOf(req)
	if prompt == "" {
		return status.Error(codes.InvalidArgument, "RunRequest needs a prompt or a user text input")
	}
	sess := s.create()
	if req.SessionId != "" {
		var err error
		if sess, err = s.lookup(req.SessionId); err != nil {
			return err
		}
	}
	sess.mu.Lock()
	if sess.running {
		sess.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "session %q already runs a task", sess.id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sess.running, sess.cancel, sess.reason = true, cancel, ""
	start := len(sess.log)
	sess.mu.Unlock()
	go sess.run(ctx, &turn{prompt: prompt, spent: sess.tokens}, req.ApprovalMode)

	if err := stream.SendHeader(metadata.Pairs("omni-session-id", sess.id)); err != nil {
		return err
	}
	err := sess.follow(stream.Context(), start, func(e entry) error {
		r := &omniv1.RunResponse{EventId: s.eventID(e.seq), SessionId: sess.id}
		if e.msg != nil {
			r.Kind = &omniv1.RunResponse_Message{Message: e.msg}
		} else {
			r.Kind = &omniv1.RunResponse_Event{Event: e.ev}
		}
		return stream.Send(r)
	})
	if stream.Context().Err() != nil && !req.DetachOnCancel {
		sess.stop("")
	}
	return err
}

// promptOf is the prompt shortcut, else the last user text in the input.
func promptOf(req *omniv1.RunRequest) string {
	if req.Prompt != "" {
		return req.Prompt
	}
	for i := len(req.Input) - 1; i >= 0; i-- {
		if t := req.Input[i].GetText(); t != nil && t.Role == omniv1.Role_ROLE_USER {
			return t.Text
		}
	}
	return ""
}

// Attach replays what followed after_event_id, re-sends approval requests
// still pending, then follows the live stream until the task ends.
func (s *Server) Attach(req *omniv1.AttachRequest, stream omniv1.AgentService_AttachServer) error {
	sess, err := s.lookup(req.SessionId)
	if err != nil {
		return err
	}
	send := func(id string, e entry) error {
		r := &omniv1.AttachResponse{EventId: id, SessionId: sess.id}
		if e.msg != nil {
			r.Kind = &omniv1.AttachResponse_Message{Message: e.msg}
		} else {
			r.Kind = &omniv1.AttachResponse_Event{Event: e.ev}
		}
		return stream.Send(r)
	}
	sess.mu.Lock()
	from, known := len(sess.log), true
	if req.AfterEventId != "" {
		var seq int64
		seq, known = s.parseEventID(req.AfterEventId)
		if known && seq <= int64(len(sess.log)) {
			from = int(seq)
		} else {
			known = false
		}
	}
	var initial []entry
	for _, p := range sess.pending {
		if int(p.seq) <= from {
			initial = append(initial, sess.log[p.seq-1])
		}
	}
	sess.mu.Unlock()
	if !known {
		resync := &omniv1.ServerEvent{Kind: &omniv1.ServerEvent_ResyncRequired{ResyncRequired: &omniv1.ResyncRequired{}}}
		if err := send("", entry{ev: resync}); err != nil {
			return err
		}
	}
	for _, e := range initial {
		if err := send(s.eventID(e.seq), e); err != nil {
			return err
		}
	}
	return sess.follow(stream.Context(), from, func(e entry) error { return send(s.eventID(e.seq), e) })
}

func (s *Server) parseEventID(id string) (int64, bool) {
	cut := strings.LastIndex(id, "-")
	if cut < 0 || id[:cut] != s.epoch {
		return 0, false
	}
	seq, err := strconv.ParseInt(id[cut+1:], 10, 64)
	return seq, err == nil && seq >= 0
}

// Approve answers the pending approval request of a tool call.
func (s *Server) Approve(_ context.Context, req *omniv1.ApproveRequest) (*omniv1.ApproveResponse, error) {
	sess, err := s.lookup(req.SessionId)
	if err != nil {
		return nil, err
	}
	if req.Decision == omniv1.Decision_DECISION_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "ApproveRequest.decision is unspecified")
	}
	if err := sess.approve(req.ToolCallId, req.Decision); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return &omniv1.ApproveResponse{}, nil
}

// Abort stops the running task; its stream ends with the abort message.
func (s *Server) Abort(_ context.Context, req *omniv1.AbortRequest) (*omniv1.AbortResponse, error) {
	sess, err := s.lookup(req.SessionId)
	if err != nil {
		return nil, err
	}
	return &omniv1.AbortResponse{WasRunning: sess.stop(req.Reason)}, nil
}

// stop cancels the running task with a reason; false when idle.
func (s *session) stop(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running || s.cancel == nil {
		return false
	}
	s.reason = reason
	s.cancel()
	return true
}

// GetHistory streams the session's recordable messages.
func (s *Server) GetHistory(req *omniv1.GetHistoryRequest, stream omniv1.AgentService_GetHistoryServer) error {
	sess, err := s.lookup(req.SessionId)
	if err != nil {
		return err
	}
	sess.mu.Lock()
	msgs := append([]*omniv1.OmniMessage(nil), sess.history...)
	sess.mu.Unlock()
	for _, m := range msgs {
		if err := stream.Send(&omniv1.GetHistoryResponse{Message: m}); err != nil {
			return err
		}
	}
	return nil
}

// ListSessions lists sessions in creation order.
func (s *Server) ListSessions(context.Context, *omniv1.ListSessionsRequest) (*omniv1.ListSessionsResponse, error) {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.order))
	for _, id := range s.order {
		sessions = append(sessions, s.sessions[id])
	}
	s.mu.Unlock()
	resp := &omniv1.ListSessionsResponse{}
	for _, sess := range sessions {
		sess.mu.Lock()
		state := omniv1.SessionState_SESSION_STATE_IDLE
		if sess.running {
			state = omniv1.SessionState_SESSION_STATE_RUNNING
		}
		resp.Sessions = append(resp.Sessions, &omniv1.SessionInfo{
			SessionId: sess.id, State: state,
			CreatedAt:    sess.created.Format(time.RFC3339Nano),
			UpdatedAt:    sess.modified.Format(time.RFC3339Nano),
			MessageCount: int64(len(sess.history)), LastEventId: s.eventID(int64(len(sess.log))),
		})
		sess.mu.Unlock()
	}
	return resp, nil
}
