// JSON from outside the hub (request bodies, user_options, group properties): strict UTF-8 and a bounded
// nesting depth, checked before anything recursive (JSON.stringify, structured clone, proto encoding) sees
// the value. The gateway applies it where it parses a body; actors apply it again to what they are sent.
import { errors } from './errors.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The text of `bytes`, or a 400 when they are not UTF-8 (never U+FFFD in place of the bad bytes). */
export function decodeUtf8(bytes: Uint8Array, what = 'Request body'): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw errors.badRequest(`${what} is not valid UTF-8`, 'HUB_ERR_REQUEST_ENCODING');
  }
}

/**
 * The deepest nesting of arrays and objects in JSON text, stopping as soon as it passes `limit`: one pass
 * over the characters (strings skipped), no recursion, so a body of a few kilobytes of `[[[[…` costs nothing.
 */
export function jsonDepthExceeds(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/** JSON text → value; a 400 naming the problem for bad JSON or nesting deeper than `maxDepth`. */
export function parseJson(text: string, maxDepth: number, what = 'Request body'): unknown {
  if (jsonDepthExceeds(text, maxDepth)) {
    throw errors.badRequest(`${what} nests arrays/objects deeper than the limit of ${maxDepth} levels`, 'HUB_ERR_REQUEST_TOO_DEEP');
  }
  try {
    return JSON.parse(text);
  } catch {
    throw errors.badRequest(`${what} must be valid JSON`);
  }
}

const isPlainObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

/**
 * `target` updated by `update` at every depth, as the established hub merges dict overrides (group overrides,
 * KubeSpawner's kubespawner_override): null removes a key, an object merges into an object, anything else replaces.
 */
export function mergedWith(target: Record<string, unknown>, update: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...target };
  for (const [k, v] of Object.entries(update)) {
    if (v === null) delete out[k];
    // defineProperty: a key named "__proto__" stays a key
    else Object.defineProperty(out, k, { value: isPlainObject(v) ? mergedWith(isPlainObject(out[k]) ? out[k] : {}, v) : v, enumerable: true, writable: true, configurable: true });
  }
  return out;
}
