/** Small helpers shared by the benchmark parts: medians, number formatting, markdown tables, the machine. */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { workerdBinary } from "./workerd.mjs";
import { wrkVersion } from "./wrk.mjs";

/** The `q`-quantile (0–1) of the finite numbers in `values`, interpolated (NaN when there are none). */
export function quantile(values, q) {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const at = (sorted.length - 1) * q;
  const below = sorted[Math.floor(at)];
  return below + (sorted[Math.ceil(at)] - below) * (at - Math.floor(at));
}

/** Median of the finite numbers in `values` (NaN when there are none). */
export const median = (values) => quantile(values, 0.5);

/** `1234.5` → `1,235`; `digits` decimals otherwise; `–` for NaN. */
export function fmt(value, digits = 0) {
  if (!Number.isFinite(value)) return "–";
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** A GitHub markdown table. */
export function table(header, rows) {
  const line = (cells) => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
}

const version = (command, args) => {
  try {
    return execFileSync(command, args, { encoding: "utf8" }).split("\n")[0].trim();
  } catch {
    return "unknown";
  }
};

/** What the numbers were measured on: they are only comparable to numbers from the same kind of machine. */
export function machine() {
  const cores = cpus();
  const nested = /nested_pvm=1/.test(version("cat", ["/proc/cmdline"])) ? " (nested virtualisation)" : "";
  return [
    `- CPU: ${cores.length} × ${cores[0]?.model ?? "unknown"}${nested}, RAM ${fmt(totalmem() / 2 ** 30)} GiB, Linux ${release()}`,
    `- Node ${process.version}; ${version(workerdBinary, ["--version"])} (\`workerd serve\`); ${version("redis-server", ["--version"]).replace(/ sha=.*/, "")}; ${wrkVersion()}`,
    "- Everything on loopback, sharing the same cores (load generator, origin, workerd, REST server, Redis).",
  ].join("\n");
}

/** Writes `bench/results/<name>.md` (the table people read) and `<name>.json` (the raw figures). */
export function writeResults(name, markdown, data) {
  const dir = new URL("../results/", import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL(`${name}.md`, dir), `${markdown}\n`);
  writeFileSync(new URL(`${name}.json`, dir), `${JSON.stringify(data, null, 2)}\n`);
}
