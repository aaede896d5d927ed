import { Buffer } from "node:buffer";
import { gunzipSync } from "node:zlib";
import { TestPeerError } from "../errors.js";

/** The outcome of {@link decodeUserData}: the script bytes, or why there are none. */
export type DecodedUserData =
  | {
      readonly ok: true;
      /** The script as the guest runs it (gunzipped when it was gzip). */
      readonly script: Buffer;
      /** Whether the user-data was gzip-compressed (magic `1f 8b`). */
      readonly gzipped: boolean;
    }
  | { readonly ok: false; readonly error: TestPeerError };

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Decodes EC2 user-data the way cloud-init does for a shell script: base64 (as
 * `DescribeInstanceAttribute userData` returns it), then gunzip when the bytes start with the
 * gzip magic `1f 8b` (guest contract §1). Total: bad input gives `{ ok: false }` with a
 * `UserDataUnreadable` error, never a throw.
 *
 * @param base64 - the attribute value, standard base64 (whitespace is ignored).
 * @example
 * ```ts
 * const decoded = decodeUserData(Buffer.from("#!/bin/bash\necho hi\n").toString("base64"));
 * if (decoded.ok) console.log(decoded.script.toString()); // "#!/bin/bash\necho hi\n"
 * ```
 */
export function decodeUserData(base64: string): DecodedUserData {
  const compact = base64.replace(/\s+/g, "");
  if (compact.length % 4 !== 0 || !BASE64.test(compact)) {
    return {
      ok: false,
      error: new TestPeerError("UserDataUnreadable", "user-data is not valid base64"),
    };
  }
  const bytes = Buffer.from(compact, "base64");
  if (bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b) {
    try {
      return { ok: true, script: gunzipSync(bytes), gzipped: true };
    } catch (cause) {
      return {
        ok: false,
        error: new TestPeerError("UserDataUnreadable", "user-data has a corrupt gzip stream", {
          cause,
        }),
      };
    }
  }
  return { ok: true, script: bytes, gzipped: false };
}
