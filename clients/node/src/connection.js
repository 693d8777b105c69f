// Where the daemon is and how to prove who we are: from options, else the environment.
//
// TOOLJAIL_TARGET: unix:///run/tooljail/tooljail.sock (the default; the daemon takes the socket
// peer's user as the principal) or host:port (TCP: a bearer token, TOOLJAIL_TOKEN, and/or TLS).

import { readFileSync } from "node:fs";
import { isIP } from "node:net";

import grpc from "@grpc/grpc-js";

/** The packaged daemon's socket, used when neither an option nor TOOLJAIL_TARGET names one. */
export const DEFAULT_TARGET = "unix:///run/tooljail/tooljail.sock";

/**
 * How to reach the daemon, resolved from options first, then `env`, then the defaults.
 *
 * @param {{target?: string, token?: string, tls?: boolean | {ca?: string | Uint8Array,
 *   cert?: string | Uint8Array, key?: string | Uint8Array}}} [options]
 * @param {Record<string, string | undefined>} [env] Where TOOLJAIL_TARGET and TOOLJAIL_TOKEN are
 *   read (process.env by default).
 * @returns {{target: string, token: string, tls: false | {ca?: Buffer, cert?: Buffer, key?: Buffer}}}
 * @throws {TypeError} when only one of `tls.cert` and `tls.key` is given, or a token would go in
 *   clear to a target off this machine.
 */
export function resolveConnection(options = {}, env = process.env) {
  const target = options.target || env.TOOLJAIL_TARGET || DEFAULT_TARGET;
  const token = options.token ?? env.TOOLJAIL_TOKEN ?? "";
  const tls = tlsFiles(options.tls);
  if (token && !tls && !onThisMachine(target)) {
    throw new TypeError(
      `refusing to send the bearer token in clear to ${target}: use TLS (the tls option), ` +
        "or reach the daemon on loopback or its Unix socket",
    );
  }
  return { target: grpcTarget(target), token, tls };
}

/**
 * Whether `target` is a Unix socket or a loopback address: a token sent in clear stays here.
 *
 * @param {string} target
 * @returns {boolean}
 */
function onThisMachine(target) {
  if (target.startsWith("unix:") || target.startsWith("unix-abstract:")) return true;
  let address = target;
  for (const scheme of ["dns:///", "ipv4:", "ipv6:"]) {
    if (address.startsWith(scheme)) address = address.slice(scheme.length);
  }
  const host = address.startsWith("[")
    ? address.slice(1, address.indexOf("]"))
    : address.slice(0, address.lastIndexOf(":"));
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.split(".")[0] === "127";
  if (isIP(host) === 6) return host === "::1" || host === "0:0:0:0:0:0:0:1";
  return false;
}

/**
 * The target as @grpc/grpc-js takes it: `unix:///abs/path`, `unix:relative/path` or host:port.
 * `unix://relative` (two slashes) would name a host, so it is rewritten to `unix:relative`.
 *
 * @param {string} target
 * @returns {string}
 */
export function grpcTarget(target) {
  if (target.startsWith("unix://") && !target.startsWith("unix:///")) {
    return `unix:${target.slice("unix://".length)}`;
  }
  return target;
}

function tlsFiles(tls) {
  if (!tls) return false;
  const { ca, cert, key } = tls === true ? {} : tls;
  if (Boolean(cert) !== Boolean(key)) {
    throw new TypeError("give both tls.cert and tls.key for mTLS, or neither");
  }
  return { ca: contents(ca), cert: contents(cert), key: contents(key) };
}

// A string is a file's path; bytes are the PEM itself.
function contents(source) {
  if (!source) return undefined;
  return typeof source === "string" ? readFileSync(source) : Buffer.from(source);
}

/**
 * The channel credentials for a resolved connection (no TLS: plaintext, as on a Unix socket).
 *
 * @param {{tls: false | {ca?: Buffer, cert?: Buffer, key?: Buffer}}} connection
 * @returns {grpc.ChannelCredentials}
 */
export function channelCredentials(connection) {
  if (!connection.tls) return grpc.credentials.createInsecure();
  const { ca, cert, key } = connection.tls;
  return grpc.credentials.createSsl(ca ?? null, key ?? null, cert ?? null);
}

/**
 * The metadata sent with every call: `authorization: Bearer <token>` when there is a token.
 *
 * @param {{token: string}} connection
 * @returns {grpc.Metadata}
 */
export function callMetadata(connection) {
  const metadata = new grpc.Metadata();
  if (connection.token) metadata.set("authorization", `Bearer ${connection.token}`);
  return metadata;
}
