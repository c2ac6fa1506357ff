/** Lua scripts are bundled as text (wrangler `[[rules]] type = "Text"`). */
declare module "*.lua" {
  const source: string;
  export default source;
}
