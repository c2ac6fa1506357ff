/** Installing a missing command from Debian's packages; see debian-package.mjs. */
export function hasCommand(command: string): boolean;
export function ensureDebianCommand(command: string, pkg?: string): boolean;
export function ensureRedis(): void;
export function ensurePrometheus(): void;
