export { freePort } from "./ports.js";
