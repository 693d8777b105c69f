// Package tooljail is the Go client of a tooljail daemon: it runs an LLM agent's tool calls
// (Anthropic tool_use blocks) under the daemon's policy and sandboxes, and hands back tool_result
// blocks ready for the next Messages API request.
//
//	client, err := tooljail.FromEnv() // TOOLJAIL_TARGET, TOOLJAIL_TOKEN
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	result, err := client.Execute(ctx, tooljail.ToolUse{
//		ID:    tooljail.NewToolUseID(),
//		Name:  "Read",
//		Input: map[string]any{"file_path": "/srv/ws/README.md"},
//	})
//	if err != nil {
//		return err // the RPC failed: see the Err* sentinels
//	}
//	fmt.Println(result.Text()) // what the model reads; result.IsError when refused or failed
//
// Two channels of failure, as in the daemon: what the model should see (a denied call, invalid
// input, a non-zero exit) is a [Result] whose IsError is set; what the calling program should see
// (unreachable daemon, bad credentials, overload, malformed request) is an error of type [*Error],
// matched with errors.Is against [ErrUnavailable], [ErrInvalidArgument] and the other sentinels.
//
// The daemon runs a tool_use id once and answers a repeat of it with the first answer, so
// [Client.Execute] retries a call that could not reach the daemon with the same id (see
// [WithRetries]). The generated protobuf and gRPC code is in package tooljailv1, for the RPCs this
// package does not wrap (ExecuteTurn); [Client.Executor] and [Client.Admin] share the connection.
package tooljail
