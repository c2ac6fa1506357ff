// Upstash key locking on stock Redis. Upstash runs a script under per-key locks when its first line is
// `#!lua flags=allow-key-locking`; Redis 7 rejects that flag ("ERR Unexpected flag in script shebang").
// So the flag is removed before Redis sees the script, and SHAs are mapped both ways: clients compute the
// SHA-1 of the ORIGINAL body, Redis caches the stripped one.
import { createHash } from "node:crypto";

const FLAG = "allow-key-locking";
const SHEBANG = /^#!lua(?<rest>[^\r\n]*)(?<eol>\r?\n|$)/;
// A bound on remembered scripts, so a client generating scripts cannot grow this without limit.
const maxScripts = 10_000;

/** @param {string | Buffer} body */
const sha1 = (body) => createHash("sha1").update(body).digest("hex");

/**
 * The script Redis should run instead of `source`, or null when `source` carries no key-locking flag. The
 * flag's line becomes empty (other flags are kept), so line numbers in Lua errors still match the source.
 * @param {string} source
 * @returns {string | null}
 */
export function stripKeyLocking(source) {
  const shebang = SHEBANG.exec(source);
  if (!shebang?.groups) return null;
  const { rest = "", eol = "" } = shebang.groups;
  const flags = /(?:^|\s)flags=(\S*)/.exec(rest);
  const list = flags?.[1]?.split(",") ?? [];
  if (!flags || !list.includes(FLAG)) return null;
  const kept = list.filter((f) => f !== FLAG && f !== "");
  const line = kept.length > 0 ? `#!lua${rest.replace(flags[0], ` flags=${kept.join(",")}`)}` : "";
  return line + eol + source.slice(shebang[0].length);
}

/**
 * Rewrites script commands on their way to Redis and their replies on the way back.
 *
 * - EVAL / EVAL_RO / SCRIPT LOAD of a flagged body send the stripped body and remember original ↔ stripped.
 * - SCRIPT LOAD answers the original body's SHA, the one the client computed.
 * - EVALSHA / EVALSHA_RO / SCRIPT EXISTS translate remembered SHAs. Nothing is answered from memory: Redis
 *   still decides, so after SCRIPT FLUSH or a Redis restart the client gets NOSCRIPT and reloads.
 * - Error texts that name the stripped SHA name the original instead.
 */
export class ScriptTranslator {
  /** @type {Map<string, string>} original sha -> stripped sha */
  #toRedis = new Map();

  /**
   * @param {Array<string | Buffer>} command name first, then its arguments
   * @returns {{ command: Array<string | Buffer>, reply?: (reply: unknown) => unknown, error?: (message: string) => string }}
   */
  prepare(command) {
    const name = String(command[0]).toLowerCase();
    const sub = command.length > 1 ? String(command[1]).toLowerCase() : "";
    if ((name === "eval" || name === "eval_ro") && command.length > 1) {
      const mapped = this.#register(command[1]);
      if (!mapped) return { command };
      return { command: [command[0], mapped.stripped, ...command.slice(2)], error: mapped.renameError };
    }
    if (name === "script" && sub === "load" && command.length > 2) {
      const mapped = this.#register(command[2]);
      if (!mapped) return { command };
      return {
        command: [command[0], command[1], mapped.stripped, ...command.slice(3)],
        reply: () => Buffer.from(mapped.original),
        error: mapped.renameError,
      };
    }
    if ((name === "evalsha" || name === "evalsha_ro") && command.length > 1) {
      const stripped = this.#toRedis.get(String(command[1]).toLowerCase());
      if (!stripped) return { command };
      const original = String(command[1]).toLowerCase();
      return { command: [command[0], stripped, ...command.slice(2)], error: rename(stripped, original) };
    }
    if (name === "script" && sub === "exists") {
      const shas = command.slice(2).map((sha) => this.#toRedis.get(String(sha).toLowerCase()) ?? sha);
      return { command: [command[0], command[1], ...shas] };
    }
    return { command };
  }

  /**
   * @param {string | Buffer | undefined} body
   * @returns {{ original: string, stripped: string, renameError: (message: string) => string } | null}
   */
  #register(body) {
    if (body === undefined) return null;
    const source = typeof body === "string" ? body : body.toString("utf8");
    if (!source.startsWith("#!lua")) return null;
    const stripped = stripKeyLocking(source);
    if (stripped === null) return null;
    const original = sha1(body);
    const strippedSha = sha1(stripped);
    this.#toRedis.delete(original); // re-insert as the newest entry
    this.#toRedis.set(original, strippedSha);
    if (this.#toRedis.size > maxScripts) {
      const oldest = this.#toRedis.keys().next().value;
      if (oldest !== undefined) this.#toRedis.delete(oldest);
    }
    return { original, stripped, renameError: rename(strippedSha, original) };
  }
}

/**
 * @param {string} from
 * @param {string} to
 * @returns {(message: string) => string}
 */
const rename = (from, to) => (message) => message.split(from).join(to);
