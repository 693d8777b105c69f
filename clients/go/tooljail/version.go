package tooljail

import tooljailv1 "github.com/tooljail/tooljail/clients/go/tooljailv1"

const (
	// ProtoVersion is the version of the wire contract (proto/VERSION) this client speaks; it is
	// written into the generated code by clients/go/generate.sh.
	ProtoVersion = tooljailv1.ProtoVersion
	// Protocol is the protobuf package of that contract.
	Protocol = "tooljail.v1"
)
