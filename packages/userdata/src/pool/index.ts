/**
 * `@nebula/userdata/pool`: the user-data of a warm-pool host (`renderPoolUserData`): it prepares
 * once (a boot unit, the images pulled) and powers off; started later with a Pod's user-data
 * (`renderUserData`, written while it is stopped), it runs that once, as cloud-init would.
 *
 * @packageDocumentation
 */
export {
  POOL_BOOT_UNIT,
  type PoolRenderOptions,
  type PoolRenderResult,
  renderPoolUserData,
} from "../pool.js";
