// @nebula/state-mapping/text: the sanitiser and cutter every status message goes through, shared
// with @nebula/rollup.
export { sanitize, truncate } from "../text.js";
