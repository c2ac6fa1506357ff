/**
 * Lua source without its comments: what the scripts send, and what the published package inlines
 * (tsup.config.ts), since Redis runs and caches the text it is sent, and comments are half the bytes of lua/.
 * Removed: every comment (line and long), then every line left blank and each line's leading and trailing
 * blanks (Lua reads no indentation). Kept: everything Lua reads, byte for byte, so a script behaves the same:
 * short strings (escapes included), long strings (`[[…]]`, `[==[…]==]`) with their blank lines and indentation,
 * the `#!lua` shebang, and the `--#include` / `--#section` lines scripts.ts assembles from (with their
 * indentation, which the lines they bring in take). The scanner follows Lua 5.1's lexer (llex.c) as far as comments
 * and strings go; nothing else needs telling apart.
 */

/** `text[i]` opens a long bracket (`[`, `=`*, `[`): its level (the count of `=`), else -1. */
function longBracketLevel(text: string, i: number): number {
  if (text[i] !== "[") return -1;
  let j = i + 1;
  while (text[j] === "=") j++;
  return text[j] === "[" ? j - i - 1 : -1;
}

/** The index just past the long bracket of `level` opened at `i` (its close, or the end of an unclosed one). */
function longBracketEnd(text: string, i: number, level: number): number {
  const close = `]${"=".repeat(level)}]`;
  const end = text.indexOf(close, i + level + 2);
  return end < 0 ? text.length : end + close.length;
}

/**
 * The index just past the short string opened by the quote at `i` (`\` escapes the next character, newline
 * too); an unclosed one ends at its line's end, where Lua refuses the chunk anyway.
 */
function shortStringEnd(text: string, i: number): number {
  const quote = text[i];
  let j = i + 1;
  while (j < text.length) {
    const c = text[j];
    if (c === "\\") j += 2;
    else if (c === quote) return j + 1;
    else if (c === "\n") return j;
    else j++;
  }
  return text.length;
}

/** The comment lines scripts.ts reads (src/engine/scripts.ts): an include or a section mark. */
const DIRECTIVES = ["--#include ", "--#section "];

/** Where the next character the scanner must look at is: a line break, a comment, a string. */
const INTERESTING = /[\n"'[-]/g;

/** `text` without comments, blank lines or blanks around a line; Lua reads the result as it reads `text`. */
export function stripLua(text: string): string {
  let out = ""; // the lines kept so far, each with its line break
  let line = ""; // the current line, as kept so far (a long string in it may hold line breaks)
  /** The current line ends: kept without its blanks around it, or dropped if nothing is left of it. */
  const endLine = () => {
    const kept = trimmed(line);
    if (kept !== "") out += `${kept}\n`;
    line = "";
  };
  // The shebang (Redis reads its flags; Lua never sees it) stays as it is.
  let i = text.startsWith("#!") ? text.indexOf("\n") : 0;
  if (i < 0) return text;
  line = text.slice(0, i);
  while (i < text.length) {
    INTERESTING.lastIndex = i;
    const at = INTERESTING.exec(text)?.index ?? text.length;
    line += text.slice(i, at);
    i = at;
    if (i >= text.length) break;
    const c = text[i];
    if (c === "\n") {
      endLine();
      i++;
    } else if (c === '"' || c === "'") {
      const end = shortStringEnd(text, i);
      line += text.slice(i, end);
      i = end;
    } else if (c === "[") {
      const level = longBracketLevel(text, i);
      const end = level < 0 ? i + 1 : longBracketEnd(text, i, level);
      line += text.slice(i, end);
      i = end;
    } else if (text[i + 1] !== "-") {
      line += c; // a minus
      i++;
    } else if (line.trim() === "" && DIRECTIVES.some((d) => text.startsWith(d, i))) {
      const end = text.indexOf("\n", i);
      line += text.slice(i, end < 0 ? text.length : end);
      i = end < 0 ? text.length : end;
    } else {
      const level = longBracketLevel(text, i + 2);
      if (level >= 0) {
        // A long comment: nothing where it sat, but a line break if it held one, so no two lines become one
        // (Lua 5.1 reads a call's `(` on a new line as a new statement).
        const end = longBracketEnd(text, i + 2, level);
        if (text.slice(i, end).includes("\n")) endLine();
        else line += " ";
        i = end;
      } else {
        // A line comment, up to its line's end (handled on the next turn).
        const end = text.indexOf("\n", i);
        i = end < 0 ? text.length : end;
      }
    }
  }
  return out + trimmed(line);
}

/**
 * A line without its trailing blanks, nor its indentation unless it is an include or section line. Only the
 * line's own start and end: a string running across lines is inside the line, and keeps its blanks.
 */
function trimmed(line: string): string {
  const kept = line.replace(/[ \t\r]+$/, "");
  const code = kept.replace(/^[ \t]+/, "");
  return DIRECTIVES.some((d) => code.startsWith(d)) ? kept : code;
}
