// google.protobuf.Struct <-> plain JSON values. Tool inputs and input schemas travel as Structs;
// @grpc/proto-loader hands them over in their wire shape ({fields: {name: {stringValue: ...}}}),
// so the client converts at the edge and its callers only ever see plain objects.

/**
 * A JSON value as a `google.protobuf.Value` in proto-loader's object shape.
 *
 * Follows JSON.stringify where JSON has an answer (`toJSON()` is called, `undefined` in an array
 * becomes null) and refuses what JSON cannot carry, rather than sending something else.
 *
 * @param {unknown} value
 * @returns {object}
 * @throws {TypeError} for a bigint, a function, a symbol, or a number that is not finite.
 */
export function toValue(value) {
  if (value !== null && typeof value === "object" && typeof value.toJSON === "function") {
    return toValue(value.toJSON());
  }
  if (value === null || value === undefined) return { nullValue: "NULL_VALUE" };
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) {
        throw new TypeError(`cannot send ${value} in JSON: numbers must be finite`);
      }
      return { numberValue: value };
    case "string":
      return { stringValue: value };
    case "boolean":
      return { boolValue: value };
    case "object":
      if (Array.isArray(value)) return { listValue: { values: value.map(toValue) } };
      return { structValue: toStruct(value) };
    default:
      throw new TypeError(`cannot send a ${typeof value} in JSON`);
  }
}

/**
 * A plain object as a `google.protobuf.Struct` (properties whose value is `undefined` are left
 * out, as JSON.stringify does).
 *
 * @param {Record<string, unknown>} object
 * @returns {{fields: Record<string, object>}}
 * @throws {TypeError} when `object` is not a plain object, or holds a value JSON cannot carry.
 */
export function toStruct(object) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    throw new TypeError(`a Struct is made from an object, not ${describe(object)}`);
  }
  const fields = {};
  for (const [key, value] of Object.entries(object)) {
    if (value !== undefined) fields[key] = toValue(value);
  }
  return { fields };
}

/**
 * A `google.protobuf.Value` as received (proto-loader with `oneofs: true`) back to plain JSON.
 *
 * @param {object | null | undefined} value
 * @returns {unknown}
 */
export function fromValue(value) {
  if (!value) return null;
  switch (value.kind ?? kindOf(value)) {
    case "structValue":
      return fromStruct(value.structValue);
    case "listValue":
      return (value.listValue?.values ?? []).map(fromValue);
    case "numberValue":
      return value.numberValue;
    case "stringValue":
      return value.stringValue;
    case "boolValue":
      return value.boolValue;
    default:
      return null;
  }
}

/**
 * A `google.protobuf.Struct` as received back to a plain object (`{}` when it is unset).
 *
 * @param {{fields?: Record<string, object>} | null | undefined} struct
 * @returns {Record<string, unknown>}
 */
export function fromStruct(struct) {
  const object = {};
  for (const [key, value] of Object.entries(struct?.fields ?? {})) object[key] = fromValue(value);
  return object;
}

// Without the `kind` virtual field (a Value built by hand), the one member that is set.
function kindOf(value) {
  const kinds = ["structValue", "listValue", "numberValue", "stringValue", "boolValue"];
  return kinds.find((kind) => value[kind] !== undefined && value[kind] !== null) ?? "nullValue";
}

function describe(value) {
  if (value === null) return "null";
  return Array.isArray(value) ? "an array" : `a ${typeof value}`;
}
