// The README is a page and docs/ a shelf: every relative link and `#anchor` in README.md and docs/*.md must
// land on a file that exists and a heading that is there, as GitHub renders it; every section a code comment
// cites by name (`README "Rules"`, `docs/leases.md, "Measured"`) must be where it says; the README stays a page.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const README_MAX_LINES = 400;

/** README.md and every Markdown page under docs/. */
const pages = (): string[] => [
  join(ROOT, "README.md"),
  ...readdirSync(join(ROOT, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => join(ROOT, "docs", name)),
];

/** The lines of a Markdown file outside fenced code blocks, with their 1-based numbers. */
function proseLines(text: string): { line: string; n: number }[] {
  const out: { line: string; n: number }[] = [];
  let fence: string | undefined;
  text.split("\n").forEach((line, i) => {
    const marker = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence === undefined && marker !== undefined) fence = marker[0];
    else if (fence !== undefined && marker?.[0] === fence) fence = undefined;
    else if (fence === undefined) out.push({ line, n: i + 1 });
  });
  return out;
}

/** GitHub's anchor for a heading's text: formatting dropped, lower case, punctuation gone, spaces to `-`. */
function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/[`*]/g, "")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a page offers: its headings (numbered `-1`, `-2` when repeated) and explicit `id`/`name`s. */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const { line } of proseLines(readFileSync(file, "utf8"))) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (heading !== undefined) {
      const base = slug(heading);
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      anchors.add(count === 0 ? base : `${base}-${count}`);
    }
    for (const m of line.matchAll(/<a\s[^>]*(?:id|name)="([^"]+)"/g)) anchors.add(m[1] as string);
  }
  return anchors;
}

/** Every link target of a page with the line it is on: inline links, images, reference definitions, HTML. */
function linksOf(file: string): { target: string; n: number }[] {
  const links: { target: string; n: number }[] = [];
  for (const { line, n } of proseLines(readFileSync(file, "utf8"))) {
    // A code span is text, not a link, but link text may hold one: drop spans outside link brackets only.
    const prose = line.replace(/(?<!\[)`[^`]*`(?!\])/g, "``");
    for (const m of prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ target: m[1] as string, n });
    }
    const definition = /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$/.exec(prose)?.[1];
    if (definition !== undefined) links.push({ target: definition, n });
    for (const m of prose.matchAll(/<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"/g)) {
      links.push({ target: m[1] as string, n });
    }
  }
  return links;
}

/** A page's named paragraphs (`**Key layout.**`, `How it runs:`), which comments cite like headings. */
function paragraphLeadsOf(file: string): string[] {
  return proseLines(readFileSync(file, "utf8")).flatMap(({ line }) => {
    const lead = /^\*\*([^*]+?)[.:]?\*\*/.exec(line)?.[1] ?? /^([A-Z][^:.`]{2,60}):\s/.exec(line)?.[1];
    return lead === undefined ? [] : [slug(lead)];
  });
}

/** The files whose comments cite the README or a page of docs/ by section. */
const CITING = ["src", "lua", "scripts", "local", "redis-rest", "test", "bench"];
const CITING_FILES = ["wrangler.toml", ".dev.vars.example", ".dependency-cruiser.cjs"];

/** The source and config files under `dir`, recursively (no dependencies, no benchmark results). */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory())
      // Dependencies, benchmark results and dot folders (bench/.baseline: an old revision) cite nothing of ours.
      return entry.name === "node_modules" || entry.name === "results" || entry.name.startsWith(".")
        ? []
        : sourceFiles(path);
    return /\.(ts|mjs|cjs|js|lua|toml)$/.test(entry.name) ? [path] : [];
  });
}

/** What a line of code becomes in `commentText`: a citation never runs across it. */
const CODE = "¶";

/**
 * A file's comments as one text, wrapped lines joined, code left out (a citation may wrap; a string in code
 * is not a comment). A Lua file's header is a block comment whose lines carry no marker: all of it counts.
 */
function commentText(file: string): string {
  const text = readFileSync(file, "utf8");
  if (file.endsWith(".lua")) return text.replace(/^\s*(?:--)?\s*/gm, "").replace(/\n/g, " ");
  return text
    .split("\n")
    .map((line) => {
      const comment = /^\s*(?:\/\/|\/\*\*?|\*|#)\s?(.*)$/.exec(line)?.[1] ?? /\s\/\/\s(.*)$/.exec(line)?.[1];
      return comment ?? CODE;
    })
    .join(" ");
}

/** Every section a comment cites by name: `README "Rules"`, `docs/leases.md, "Measured"`, `README.md#rules`. */
function citationsOf(file: string): { page: string; section: string }[] {
  const text = commentText(file);
  const out: { page: string; section: string }[] = [];
  const named = /((?:[\w.-]+\/)*[\w.-]*\.md|README)(?:'s)?[:,]?\s+\(?"([^"¶]+)"((?:,\s+"[^"¶]+")*)/g;
  for (const m of text.matchAll(named)) {
    const page = m[1] === "README" ? "README.md" : (m[1] as string);
    for (const section of [
      m[2] as string,
      ...[...(m[3] ?? "").matchAll(/"([^"]+)"/g)].map((s) => s[1] as string),
    ]) {
      out.push({ page, section });
    }
  }
  for (const m of text.matchAll(/\bdocs\/[\w-]+\.md\b/g)) out.push({ page: m[0], section: "" });
  for (const m of text.matchAll(/((?:[\w.-]+\/)*[\w.-]+\.md)#([\w-]+)/g)) {
    out.push({ page: m[1] as string, section: `#${m[2]}` });
  }
  return out;
}

/** What is wrong with one link of `file`, or undefined when it resolves. */
function brokenLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto:: not this test's business
  const hash = target.indexOf("#");
  const path = decodeURIComponent((hash < 0 ? target : target.slice(0, hash)).replace(/\?.*$/, ""));
  const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const resolved = path === "" ? file : resolve(dirname(file), path);
  if (!existsSync(resolved)) return `${target}: no such file`;
  if (anchor === undefined || anchor === "") return undefined;
  if (!resolved.endsWith(".md")) return `${target}: an anchor into a file that is not Markdown`;
  return anchorsOf(resolved).has(anchor) ? undefined : `${target}: no heading "#${anchor}" there`;
}

describe("the README and docs/", () => {
  it("makes GitHub's anchors from headings", () => {
    expect(slug("Why is this client blocked? Reset it.")).toBe("why-is-this-client-blocked-reset-it");
    expect(slug("The local Upstash-compatible REST server (`redis-rest/`)")).toBe(
      "the-local-upstash-compatible-rest-server-redis-rest",
    );
    expect(slug('With `missing = "ip"`, a key value equal to an IP')).toBe(
      "with-missing--ip-a-key-value-equal-to-an-ip",
    );
    expect(slug("Live mode switch: roll out in `monitor`, turn a rule off")).toBe(
      "live-mode-switch-roll-out-in-monitor-turn-a-rule-off",
    );
  });

  it("has no relative link or #anchor that leads nowhere", () => {
    const broken: string[] = [];
    let checked = 0;
    for (const file of pages()) {
      for (const { target, n } of linksOf(file)) {
        checked += 1;
        const problem = brokenLink(file, target);
        if (problem !== undefined) broken.push(`${relative(ROOT, file)}:${n}: ${problem}`);
      }
    }
    expect(broken).toEqual([]);
    // The pages really link to each other: a parser that found nothing would pass the check above.
    expect(checked).toBeGreaterThan(50);
  });

  it("has every section a code comment cites, on the page the comment names", () => {
    const files = [
      ...CITING.flatMap((dir) => sourceFiles(join(ROOT, dir))),
      ...CITING_FILES.map((f) => join(ROOT, f)),
    ];
    const stale: string[] = [];
    let checked = 0;
    for (const file of files) {
      for (const { page, section } of citationsOf(file)) {
        const target = join(ROOT, page);
        checked += 1;
        if (!existsSync(target)) {
          stale.push(`${relative(ROOT, file)}: ${page} does not exist`);
          continue;
        }
        if (section === "") continue;
        const anchors = [...anchorsOf(target), ...paragraphLeadsOf(target)];
        const wanted = section.startsWith("#") ? section.slice(1) : slug(section);
        // A citation may shorten a heading ("Live mode switch" for "Live mode switch: roll out in ...").
        if (!anchors.some((a) => a === wanted || a.startsWith(`${wanted}-`))) {
          stale.push(`${relative(ROOT, file)}: ${page} has no section "${section}"`);
        }
      }
    }
    expect(stale).toEqual([]);
    expect(checked).toBeGreaterThan(20);
  });

  it(`keeps the README a page: at most ${README_MAX_LINES} lines`, () => {
    const lines = readFileSync(join(ROOT, "README.md"), "utf8").trimEnd().split("\n").length;
    expect(lines).toBeLessThanOrEqual(README_MAX_LINES);
  });

  it("links the README to the pages of docs/ a reader goes on to", () => {
    const readme = join(ROOT, "README.md");
    const targets = new Set(linksOf(readme).map(({ target }) => resolve(ROOT, target.replace(/#.*$/, ""))));
    for (const page of [
      "configuration",
      "algorithms",
      "leases",
      "failure-modes",
      "operating",
      "limitations",
      "scaling-out",
      "middleware",
      "benchmarks",
      "development",
    ]) {
      expect(targets, `README links docs/${page}.md`).toContain(join(ROOT, "docs", `${page}.md`));
    }
  });
});
