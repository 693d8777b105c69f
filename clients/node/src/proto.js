// Loads the wire contract shipped inside the package (proto/tooljail/v1/executor.proto, a copy
// of the repository's proto/ that `npm run check-proto` keeps identical) at run time: no
// generated code.

import { fileURLToPath } from "node:url";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

/** The folder holding tooljail/v1/executor.proto inside the package. */
export const PROTO_DIR = fileURLToPath(new URL("../proto", import.meta.url));
/** The contract's path under PROTO_DIR. */
export const PROTO_FILE = "tooljail/v1/executor.proto";

let loaded;

/**
 * The generated-at-run-time service constructors, loaded once.
 *
 * @returns {{Executor: grpc.ServiceClientConstructor, Admin: grpc.ServiceClientConstructor}}
 */
export function services() {
  if (!loaded) {
    const definition = protoLoader.loadSync(PROTO_FILE, {
      includeDirs: [PROTO_DIR],
      // Enums as their names ("ASK"), int64 as numbers, unset fields as their defaults
      // (isError: false), and oneofs with a virtual field naming the member that is set.
      enums: String,
      longs: Number,
      defaults: true,
      oneofs: true,
    });
    const v1 = grpc.loadPackageDefinition(definition).tooljail.v1;
    loaded = { Executor: v1.Executor, Admin: v1.Admin };
  }
  return loaded;
}
