// Package scripted is a tiny deterministic agent engine behind a real
// AgentService: every prompt gets the same scripted turn, with fixed
// timestamps, so a consumer in any language can check it received exactly
// what was sent.
package scripted

import (
	"encoding/json"
	"fmt"
	"strings"

	omniv1 "github.com/omni-grpc/omni-grpc/generated/go/omni/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// ToolCallID is the id of the one tool call in every scripted turn.
const ToolCallID = "call_1"

const (
	assistant = omniv1.Role_ROLE_ASSISTANT
	completed = omniv1.StopReason_STOP_REASON_COMPLETED
)

// turn builds the messages of one scripted run. Its clock hands out fixed,
// increasing timestamps. spent is the session's running token total, which
// each token_usage adds its request to (the session owns it; one run at a time).
type turn struct {
	prompt string
	tick   int
	spent  *omniv1.TokenCounts
}

func (t *turn) stamp(m *omniv1.OmniMessage) *omniv1.OmniMessage {
	t.tick++
	m.Timestamp = fmt.Sprintf("2026-01-01T00:00:%02d.000Z", t.tick%60)
	return m
}

func (t *turn) words() int { return len(strings.Fields(t.prompt)) }

// beforeApproval is everything up to and including the tool call that needs
// approval: streamed text, then the call.
func (t *turn) beforeApproval() []*omniv1.OmniMessage {
	fidelity, _ := structpb.NewStruct(map[string]interface{}{"signature": "scripted-go"})
	args, _ := json.Marshal(map[string]string{"text": t.prompt})
	msgs := []*omniv1.OmniMessage{t.stamp(&omniv1.OmniMessage{
		Payload: &omniv1.OmniMessage_RequestBegin{RequestBegin: &omniv1.RequestBegin{}}})}
	msgs = append(msgs, t.streamedText([]string{"You said: ", t.prompt}, fidelity)...)
	return append(msgs, t.stamp(&omniv1.OmniMessage{
		Payload: &omniv1.OmniMessage_ToolCall{ToolCall: &omniv1.ToolCall{
			Role: assistant, Name: "word_count", Arguments: string(args),
			ToolCallId: ToolCallID, StopReason: completed}}}))
}

// decided is the approval_decision and the tool's output (the count when
// allowed, the protocol's denial text otherwise).
func (t *turn) decided(d omniv1.Decision) []*omniv1.OmniMessage {
	out := &omniv1.ToolCallOutput{Role: omniv1.Role_ROLE_USER, ToolCallId: ToolCallID, StopReason: completed,
		Output: fmt.Sprintf("%d words", t.words())}
	if d != omniv1.Decision_DECISION_ALLOW {
		out.Output, out.StopReason = "Tool call denied by user.", omniv1.StopReason_STOP_REASON_ABORTED
	}
	return []*omniv1.OmniMessage{
		t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_ApprovalDecision{
			ApprovalDecision: &omniv1.ApprovalDecision{Decision: d, ToolCallId: ToolCallID}}}),
		t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_ToolCallOutput{ToolCallOutput: out}}),
	}
}

// afterApproval closes the first request and runs a second one that streams
// a closing sentence.
func (t *turn) afterApproval() []*omniv1.OmniMessage {
	msgs := []*omniv1.OmniMessage{t.usage(12, 7), t.requestEnd(), t.stamp(&omniv1.OmniMessage{
		Payload: &omniv1.OmniMessage_RequestBegin{RequestBegin: &omniv1.RequestBegin{}}})}
	msgs = append(msgs, t.streamedText([]string{fmt.Sprintf("That was %d words.", t.words())}, nil)...)
	return append(msgs, t.usage(30, 5), t.requestEnd())
}

// aborted is the last message of an aborted run.
func (t *turn) aborted(reason string) *omniv1.OmniMessage {
	return t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_Abort{
		Abort: &omniv1.Abort{Reason: proto.String(reason)}}})
}

// streamedText is one text segment: start, a delta per piece, stop, then the
// complete message (the protocol's streaming discipline).
func (t *turn) streamedText(pieces []string, fidelity *structpb.Struct) []*omniv1.OmniMessage {
	partial := func(et omniv1.EventType, text string) *omniv1.OmniMessage {
		return t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_PartialText{
			PartialText: &omniv1.PartialText{Role: assistant, EventType: et, Text: text, StopReason: completed}}})
	}
	msgs := []*omniv1.OmniMessage{partial(omniv1.EventType_EVENT_TYPE_START, "")}
	for _, p := range pieces {
		msgs = append(msgs, partial(omniv1.EventType_EVENT_TYPE_DELTA, p))
	}
	msgs = append(msgs, partial(omniv1.EventType_EVENT_TYPE_STOP, ""))
	return append(msgs, t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_Text{
		Text: &omniv1.Text{Role: assistant, Text: strings.Join(pieces, ""), StopReason: completed, Fidelity: fidelity}}}))
}

// usage reports one request's tokens and the session's totals so far, which
// include it: every view (run, SSE done, history) sums to the same figure.
func (t *turn) usage(prompt, output int64) *omniv1.OmniMessage {
	request := &omniv1.TokenCounts{CacheWrite: prompt, Output: output, Total: prompt + output}
	t.spent.CacheRead += request.CacheRead
	t.spent.CacheWrite += request.CacheWrite
	t.spent.Output += request.Output
	t.spent.Total += request.Total
	session := proto.Clone(t.spent).(*omniv1.TokenCounts)
	return t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_TokenUsage{
		TokenUsage: &omniv1.TokenUsage{Session: session, Request: request}}})
}

func (t *turn) requestEnd() *omniv1.OmniMessage {
	return t.stamp(&omniv1.OmniMessage{Payload: &omniv1.OmniMessage_RequestEnd{
		RequestEnd: &omniv1.RequestEnd{Status: completed}}})
}
