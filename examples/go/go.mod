module github.com/omni-grpc/omni-grpc/examples/go

go 1.19

require (
	github.com/omni-grpc/omni-grpc/generated/go v0.0.0
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

replace github.com/omni-grpc/omni-grpc/generated/go => ../../generated/go
