// google.protobuf.Struct <-> plain JSON. Tool inputs and input schemas travel as Structs; proto-loader
// hands them over in their wire shape ({fields: {name: {stringValue: ...}}}), so the example converts
// at the edge and works on plain objects everywhere else.

export function toValue(value) {
  if (value === null || value === undefined) return { nullValue: "NULL_VALUE" };
  if (typeof value === "number") return { numberValue: value };
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(toValue) } };
  if (typeof value === "object") return { structValue: toStruct(value) };
  throw new TypeError(`cannot send a ${typeof value} as JSON in a tool input`);
}

export function toStruct(object) {
  return { fields: Object.fromEntries(Object.entries(object).map(([k, v]) => [k, toValue(v)])) };
}

export function fromValue(value) {
  if (value.structValue) {
    const fields = value.structValue.fields ?? {};
    return Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, fromValue(v)]));
  }
  if (value.listValue) return (value.listValue.values ?? []).map(fromValue);
  if (value.kind === "nullValue" || value.nullValue !== undefined) return null;
  return value.numberValue ?? value.stringValue ?? value.boolValue ?? null;
}
