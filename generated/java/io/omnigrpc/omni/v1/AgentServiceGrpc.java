package io.omnigrpc.omni.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: omni/v1/agent_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class AgentServiceGrpc {

  private AgentServiceGrpc() {}

  public static final String SERVICE_NAME = "omni.v1.AgentService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.RunRequest,
      io.omnigrpc.omni.v1.RunResponse> getRunMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Run",
      requestType = io.omnigrpc.omni.v1.RunRequest.class,
      responseType = io.omnigrpc.omni.v1.RunResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.RunRequest,
      io.omnigrpc.omni.v1.RunResponse> getRunMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.RunRequest, io.omnigrpc.omni.v1.RunResponse> getRunMethod;
    if ((getRunMethod = AgentServiceGrpc.getRunMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getRunMethod = AgentServiceGrpc.getRunMethod) == null) {
          AgentServiceGrpc.getRunMethod = getRunMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.RunRequest, io.omnigrpc.omni.v1.RunResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Run"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.RunRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.RunResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("Run"))
              .build();
        }
      }
    }
    return getRunMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.AttachRequest,
      io.omnigrpc.omni.v1.AttachResponse> getAttachMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Attach",
      requestType = io.omnigrpc.omni.v1.AttachRequest.class,
      responseType = io.omnigrpc.omni.v1.AttachResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.AttachRequest,
      io.omnigrpc.omni.v1.AttachResponse> getAttachMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.AttachRequest, io.omnigrpc.omni.v1.AttachResponse> getAttachMethod;
    if ((getAttachMethod = AgentServiceGrpc.getAttachMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getAttachMethod = AgentServiceGrpc.getAttachMethod) == null) {
          AgentServiceGrpc.getAttachMethod = getAttachMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.AttachRequest, io.omnigrpc.omni.v1.AttachResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Attach"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.AttachRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.AttachResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("Attach"))
              .build();
        }
      }
    }
    return getAttachMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.ApproveRequest,
      io.omnigrpc.omni.v1.ApproveResponse> getApproveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Approve",
      requestType = io.omnigrpc.omni.v1.ApproveRequest.class,
      responseType = io.omnigrpc.omni.v1.ApproveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.ApproveRequest,
      io.omnigrpc.omni.v1.ApproveResponse> getApproveMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.ApproveRequest, io.omnigrpc.omni.v1.ApproveResponse> getApproveMethod;
    if ((getApproveMethod = AgentServiceGrpc.getApproveMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getApproveMethod = AgentServiceGrpc.getApproveMethod) == null) {
          AgentServiceGrpc.getApproveMethod = getApproveMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.ApproveRequest, io.omnigrpc.omni.v1.ApproveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Approve"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.ApproveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.ApproveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("Approve"))
              .build();
        }
      }
    }
    return getApproveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.AbortRequest,
      io.omnigrpc.omni.v1.AbortResponse> getAbortMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Abort",
      requestType = io.omnigrpc.omni.v1.AbortRequest.class,
      responseType = io.omnigrpc.omni.v1.AbortResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.AbortRequest,
      io.omnigrpc.omni.v1.AbortResponse> getAbortMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.AbortRequest, io.omnigrpc.omni.v1.AbortResponse> getAbortMethod;
    if ((getAbortMethod = AgentServiceGrpc.getAbortMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getAbortMethod = AgentServiceGrpc.getAbortMethod) == null) {
          AgentServiceGrpc.getAbortMethod = getAbortMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.AbortRequest, io.omnigrpc.omni.v1.AbortResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Abort"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.AbortRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.AbortResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("Abort"))
              .build();
        }
      }
    }
    return getAbortMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.GetHistoryRequest,
      io.omnigrpc.omni.v1.GetHistoryResponse> getGetHistoryMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetHistory",
      requestType = io.omnigrpc.omni.v1.GetHistoryRequest.class,
      responseType = io.omnigrpc.omni.v1.GetHistoryResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.GetHistoryRequest,
      io.omnigrpc.omni.v1.GetHistoryResponse> getGetHistoryMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.GetHistoryRequest, io.omnigrpc.omni.v1.GetHistoryResponse> getGetHistoryMethod;
    if ((getGetHistoryMethod = AgentServiceGrpc.getGetHistoryMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getGetHistoryMethod = AgentServiceGrpc.getGetHistoryMethod) == null) {
          AgentServiceGrpc.getGetHistoryMethod = getGetHistoryMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.GetHistoryRequest, io.omnigrpc.omni.v1.GetHistoryResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetHistory"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.GetHistoryRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.GetHistoryResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("GetHistory"))
              .build();
        }
      }
    }
    return getGetHistoryMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.ListSessionsRequest,
      io.omnigrpc.omni.v1.ListSessionsResponse> getListSessionsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListSessions",
      requestType = io.omnigrpc.omni.v1.ListSessionsRequest.class,
      responseType = io.omnigrpc.omni.v1.ListSessionsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.ListSessionsRequest,
      io.omnigrpc.omni.v1.ListSessionsResponse> getListSessionsMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.ListSessionsRequest, io.omnigrpc.omni.v1.ListSessionsResponse> getListSessionsMethod;
    if ((getListSessionsMethod = AgentServiceGrpc.getListSessionsMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getListSessionsMethod = AgentServiceGrpc.getListSessionsMethod) == null) {
          AgentServiceGrpc.getListSessionsMethod = getListSessionsMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.ListSessionsRequest, io.omnigrpc.omni.v1.ListSessionsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListSessions"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.ListSessionsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.ListSessionsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("ListSessions"))
              .build();
        }
      }
    }
    return getListSessionsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.DeleteSessionRequest,
      io.omnigrpc.omni.v1.DeleteSessionResponse> getDeleteSessionMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeleteSession",
      requestType = io.omnigrpc.omni.v1.DeleteSessionRequest.class,
      responseType = io.omnigrpc.omni.v1.DeleteSessionResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.DeleteSessionRequest,
      io.omnigrpc.omni.v1.DeleteSessionResponse> getDeleteSessionMethod() {
    io.grpc.MethodDescriptor<io.omnigrpc.omni.v1.DeleteSessionRequest, io.omnigrpc.omni.v1.DeleteSessionResponse> getDeleteSessionMethod;
    if ((getDeleteSessionMethod = AgentServiceGrpc.getDeleteSessionMethod) == null) {
      synchronized (AgentServiceGrpc.class) {
        if ((getDeleteSessionMethod = AgentServiceGrpc.getDeleteSessionMethod) == null) {
          AgentServiceGrpc.getDeleteSessionMethod = getDeleteSessionMethod =
              io.grpc.MethodDescriptor.<io.omnigrpc.omni.v1.DeleteSessionRequest, io.omnigrpc.omni.v1.DeleteSessionResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeleteSession"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.DeleteSessionRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.omnigrpc.omni.v1.DeleteSessionResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AgentServiceMethodDescriptorSupplier("DeleteSession"))
              .build();
        }
      }
    }
    return getDeleteSessionMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static AgentServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AgentServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AgentServiceStub>() {
        @java.lang.Override
        public AgentServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AgentServiceStub(channel, callOptions);
        }
      };
    return AgentServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static AgentServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AgentServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AgentServiceBlockingStub>() {
        @java.lang.Override
        public AgentServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AgentServiceBlockingStub(channel, callOptions);
        }
      };
    return AgentServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static AgentServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AgentServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AgentServiceFutureStub>() {
        @java.lang.Override
        public AgentServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AgentServiceFutureStub(channel, callOptions);
        }
      };
    return AgentServiceFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class AgentServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Starts a task (on a new session when session_id is empty) and streams
     * everything it produces. Cancelling the call aborts the task unless
     * detach_on_cancel is set. The session id is in every response and in the
     * "omni-session-id" initial metadata.
     * </pre>
     */
    public void run(io.omnigrpc.omni.v1.RunRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.RunResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRunMethod(), responseObserver);
    }

    /**
     * <pre>
     * Re-attaches to a session's live stream, replaying what came after
     * after_event_id, or sending resync_required when that id is gone.
     * </pre>
     */
    public void attach(io.omnigrpc.omni.v1.AttachRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.AttachResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAttachMethod(), responseObserver);
    }

    /**
     * <pre>
     * Answers an approval_request (approval mode ASK).
     * </pre>
     */
    public void approve(io.omnigrpc.omni.v1.ApproveRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.ApproveResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getApproveMethod(), responseObserver);
    }

    /**
     * <pre>
     * Stops the running task; its stream still delivers the final abort message.
     * </pre>
     */
    public void abort(io.omnigrpc.omni.v1.AbortRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.AbortResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAbortMethod(), responseObserver);
    }

    /**
     * <pre>
     * Streams the session's recorded messages (its trace).
     * </pre>
     */
    public void getHistory(io.omnigrpc.omni.v1.GetHistoryRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.GetHistoryResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetHistoryMethod(), responseObserver);
    }

    /**
     */
    public void listSessions(io.omnigrpc.omni.v1.ListSessionsRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.ListSessionsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListSessionsMethod(), responseObserver);
    }

    /**
     * <pre>
     * Ends a session. A running task is aborted first ("session deleted"; its
     * stream still delivers the abort and task_state idle). Then the session
     * leaves the index, its replay buffer and pending approvals are freed, and
     * every stream still open on it ends with NOT_FOUND. The trace and the
     * workspace stay on disk unless delete_trace is set. NOT_FOUND for an
     * unknown session.
     * </pre>
     */
    public void deleteSession(io.omnigrpc.omni.v1.DeleteSessionRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.DeleteSessionResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeleteSessionMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getRunMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.RunRequest,
                io.omnigrpc.omni.v1.RunResponse>(
                  this, METHODID_RUN)))
          .addMethod(
            getAttachMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.AttachRequest,
                io.omnigrpc.omni.v1.AttachResponse>(
                  this, METHODID_ATTACH)))
          .addMethod(
            getApproveMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.ApproveRequest,
                io.omnigrpc.omni.v1.ApproveResponse>(
                  this, METHODID_APPROVE)))
          .addMethod(
            getAbortMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.AbortRequest,
                io.omnigrpc.omni.v1.AbortResponse>(
                  this, METHODID_ABORT)))
          .addMethod(
            getGetHistoryMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.GetHistoryRequest,
                io.omnigrpc.omni.v1.GetHistoryResponse>(
                  this, METHODID_GET_HISTORY)))
          .addMethod(
            getListSessionsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.ListSessionsRequest,
                io.omnigrpc.omni.v1.ListSessionsResponse>(
                  this, METHODID_LIST_SESSIONS)))
          .addMethod(
            getDeleteSessionMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.omnigrpc.omni.v1.DeleteSessionRequest,
                io.omnigrpc.omni.v1.DeleteSessionResponse>(
                  this, METHODID_DELETE_SESSION)))
          .build();
    }
  }

  /**
   */
  public static final class AgentServiceStub extends io.grpc.stub.AbstractAsyncStub<AgentServiceStub> {
    private AgentServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AgentServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AgentServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Starts a task (on a new session when session_id is empty) and streams
     * everything it produces. Cancelling the call aborts the task unless
     * detach_on_cancel is set. The session id is in every response and in the
     * "omni-session-id" initial metadata.
     * </pre>
     */
    public void run(io.omnigrpc.omni.v1.RunRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.RunResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getRunMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Re-attaches to a session's live stream, replaying what came after
     * after_event_id, or sending resync_required when that id is gone.
     * </pre>
     */
    public void attach(io.omnigrpc.omni.v1.AttachRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.AttachResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getAttachMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Answers an approval_request (approval mode ASK).
     * </pre>
     */
    public void approve(io.omnigrpc.omni.v1.ApproveRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.ApproveResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getApproveMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Stops the running task; its stream still delivers the final abort message.
     * </pre>
     */
    public void abort(io.omnigrpc.omni.v1.AbortRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.AbortResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAbortMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Streams the session's recorded messages (its trace).
     * </pre>
     */
    public void getHistory(io.omnigrpc.omni.v1.GetHistoryRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.GetHistoryResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getGetHistoryMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     */
    public void listSessions(io.omnigrpc.omni.v1.ListSessionsRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.ListSessionsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListSessionsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Ends a session. A running task is aborted first ("session deleted"; its
     * stream still delivers the abort and task_state idle). Then the session
     * leaves the index, its replay buffer and pending approvals are freed, and
     * every stream still open on it ends with NOT_FOUND. The trace and the
     * workspace stay on disk unless delete_trace is set. NOT_FOUND for an
     * unknown session.
     * </pre>
     */
    public void deleteSession(io.omnigrpc.omni.v1.DeleteSessionRequest request,
        io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.DeleteSessionResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeleteSessionMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class AgentServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<AgentServiceBlockingStub> {
    private AgentServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AgentServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AgentServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Starts a task (on a new session when session_id is empty) and streams
     * everything it produces. Cancelling the call aborts the task unless
     * detach_on_cancel is set. The session id is in every response and in the
     * "omni-session-id" initial metadata.
     * </pre>
     */
    public java.util.Iterator<io.omnigrpc.omni.v1.RunResponse> run(
        io.omnigrpc.omni.v1.RunRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getRunMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Re-attaches to a session's live stream, replaying what came after
     * after_event_id, or sending resync_required when that id is gone.
     * </pre>
     */
    public java.util.Iterator<io.omnigrpc.omni.v1.AttachResponse> attach(
        io.omnigrpc.omni.v1.AttachRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getAttachMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Answers an approval_request (approval mode ASK).
     * </pre>
     */
    public io.omnigrpc.omni.v1.ApproveResponse approve(io.omnigrpc.omni.v1.ApproveRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getApproveMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Stops the running task; its stream still delivers the final abort message.
     * </pre>
     */
    public io.omnigrpc.omni.v1.AbortResponse abort(io.omnigrpc.omni.v1.AbortRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAbortMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Streams the session's recorded messages (its trace).
     * </pre>
     */
    public java.util.Iterator<io.omnigrpc.omni.v1.GetHistoryResponse> getHistory(
        io.omnigrpc.omni.v1.GetHistoryRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getGetHistoryMethod(), getCallOptions(), request);
    }

    /**
     */
    public io.omnigrpc.omni.v1.ListSessionsResponse listSessions(io.omnigrpc.omni.v1.ListSessionsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListSessionsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Ends a session. A running task is aborted first ("session deleted"; its
     * stream still delivers the abort and task_state idle). Then the session
     * leaves the index, its replay buffer and pending approvals are freed, and
     * every stream still open on it ends with NOT_FOUND. The trace and the
     * workspace stay on disk unless delete_trace is set. NOT_FOUND for an
     * unknown session.
     * </pre>
     */
    public io.omnigrpc.omni.v1.DeleteSessionResponse deleteSession(io.omnigrpc.omni.v1.DeleteSessionRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeleteSessionMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class AgentServiceFutureStub extends io.grpc.stub.AbstractFutureStub<AgentServiceFutureStub> {
    private AgentServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AgentServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AgentServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Answers an approval_request (approval mode ASK).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.omnigrpc.omni.v1.ApproveResponse> approve(
        io.omnigrpc.omni.v1.ApproveRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getApproveMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Stops the running task; its stream still delivers the final abort message.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.omnigrpc.omni.v1.AbortResponse> abort(
        io.omnigrpc.omni.v1.AbortRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAbortMethod(), getCallOptions()), request);
    }

    /**
     */
    public com.google.common.util.concurrent.ListenableFuture<io.omnigrpc.omni.v1.ListSessionsResponse> listSessions(
        io.omnigrpc.omni.v1.ListSessionsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListSessionsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Ends a session. A running task is aborted first ("session deleted"; its
     * stream still delivers the abort and task_state idle). Then the session
     * leaves the index, its replay buffer and pending approvals are freed, and
     * every stream still open on it ends with NOT_FOUND. The trace and the
     * workspace stay on disk unless delete_trace is set. NOT_FOUND for an
     * unknown session.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.omnigrpc.omni.v1.DeleteSessionResponse> deleteSession(
        io.omnigrpc.omni.v1.DeleteSessionRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeleteSessionMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_RUN = 0;
  private static final int METHODID_ATTACH = 1;
  private static final int METHODID_APPROVE = 2;
  private static final int METHODID_ABORT = 3;
  private static final int METHODID_GET_HISTORY = 4;
  private static final int METHODID_LIST_SESSIONS = 5;
  private static final int METHODID_DELETE_SESSION = 6;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AgentServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(AgentServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_RUN:
          serviceImpl.run((io.omnigrpc.omni.v1.RunRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.RunResponse>) responseObserver);
          break;
        case METHODID_ATTACH:
          serviceImpl.attach((io.omnigrpc.omni.v1.AttachRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.AttachResponse>) responseObserver);
          break;
        case METHODID_APPROVE:
          serviceImpl.approve((io.omnigrpc.omni.v1.ApproveRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.ApproveResponse>) responseObserver);
          break;
        case METHODID_ABORT:
          serviceImpl.abort((io.omnigrpc.omni.v1.AbortRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.AbortResponse>) responseObserver);
          break;
        case METHODID_GET_HISTORY:
          serviceImpl.getHistory((io.omnigrpc.omni.v1.GetHistoryRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.GetHistoryResponse>) responseObserver);
          break;
        case METHODID_LIST_SESSIONS:
          serviceImpl.listSessions((io.omnigrpc.omni.v1.ListSessionsRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.ListSessionsResponse>) responseObserver);
          break;
        case METHODID_DELETE_SESSION:
          serviceImpl.deleteSession((io.omnigrpc.omni.v1.DeleteSessionRequest) request,
              (io.grpc.stub.StreamObserver<io.omnigrpc.omni.v1.DeleteSessionResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class AgentServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    AgentServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.omnigrpc.omni.v1.AgentServiceProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("AgentService");
    }
  }

  private static final class AgentServiceFileDescriptorSupplier
      extends AgentServiceBaseDescriptorSupplier {
    AgentServiceFileDescriptorSupplier() {}
  }

  private static final class AgentServiceMethodDescriptorSupplier
      extends AgentServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    AgentServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (AgentServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new AgentServiceFileDescriptorSupplier())
              .addMethod(getRunMethod())
              .addMethod(getAttachMethod())
              .addMethod(getApproveMethod())
              .addMethod(getAbortMethod())
              .addMethod(getGetHistoryMethod())
              .addMethod(getListSessionsMethod())
              .addMethod(getDeleteSessionMethod())
              .build();
        }
      }
    }
    return result;
  }
}
