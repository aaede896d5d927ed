// @nebula/virtual-node/config: the virtual node's configuration schema as zod, for tools that check
// a configuration before a virtual node is built from it (a chart's values schema, a CLI's check).
// The root entry's `parseVirtualNodeConfig` parses with it.
export { VirtualNodeConfigSchema } from "../config.js";
