/**
 * The dashboard's stylesheet, served as `/__floodgate/dashboard.css` (the CSP allows no inline style). On a
 * phone (or any coarse pointer) every control is a target of at least 44 × 44 px and inputs use 16 px text
 * (smaller makes iOS zoom on focus); the summary comes first and rule cards start collapsed (client.ts).
 */
export const DASHBOARD_STYLE = `
:root { font-family: system-ui, sans-serif; color: #1a202c; background: #f7fafc; }
body { margin: 0 auto; max-width: 1200px; padding: 1rem; }
header { display: flex; align-items: baseline; gap: 1rem; flex-wrap: wrap; }
header h1 { margin: 0; font-size: 1.4rem; }
header .updated { color: #718096; font-size: 0.85rem; flex: 1; }
button { cursor: pointer; }
#status { min-height: 1.4em; margin: 0.5rem 0; }
#status.ok { color: #22543d; }
#status.error, .error { color: #9b2c2c; }
#summary p { margin: 0 0 0.5rem; font-size: 1.05rem; }
dl { margin: 0; }
dt { color: #718096; font-size: 0.75rem; text-transform: uppercase; }
dd { margin: 0; font-weight: 600; }
.health { display: flex; flex-wrap: wrap; gap: 1.5rem; background: #fff; padding: 0.75rem; border-radius: 6px; }
.freshness { color: #975a16; margin: 0.25rem 0; min-height: 1em; }
.stale { opacity: 0.45; filter: grayscale(1); }
.status-ok { color: #276749; }
.status-degraded { color: #9b2c2c; }
#global { margin-top: 0.75rem; }
form.inline { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: end; }
#rules { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 1rem; margin-top: 1rem; }
.rule { background: #fff; border-radius: 6px; padding: 0.75rem; box-shadow: 0 1px 2px #0002; }
.rule summary { cursor: pointer; display: flex; align-items: center; gap: 0.5rem; flex-wrap: wrap; }
.rule h2 { margin: 0; font-size: 1.1rem; font-family: ui-monospace, monospace; }
.pill { font-size: 0.75rem; background: #edf2f7; border-radius: 999px; padding: 0.1rem 0.5rem; }
.facts { display: grid; grid-template-columns: 1fr 1fr; gap: 0.4rem; margin-top: 0.5rem; }
.counts { width: 100%; border-collapse: collapse; margin: 0.5rem 0; font-variant-numeric: tabular-nums; }
.counts th, .counts td { text-align: right; padding: 0.15rem 0.4rem; border-bottom: 1px solid #edf2f7; }
.counts thead th:nth-child(2) { color: #2f855a; }
.counts thead th:nth-child(3) { color: #c53030; }
.counts thead th:nth-child(4) { color: #b7791f; }
.chart { width: 100%; height: 60px; background: #f7fafc; }
.lists { display: grid; grid-template-columns: 1fr; gap: 0.5rem; font-size: 0.8rem; }
.lists h3 { font-size: 0.8rem; margin: 0.5rem 0 0.25rem; }
.lists ol { margin: 0; padding-left: 1.2rem; font-family: ui-monospace, monospace; word-break: break-all; }
.lists li { margin-bottom: 0.25rem; }
.label { font-family: system-ui, sans-serif; background: #ebf8ff; color: #2a4365; border-radius: 4px; padding: 0 0.3rem; }
.masked { color: #4a5568; background: #f7fafc; border: 1px dashed #cbd5e0; border-radius: 4px; padding: 0 0.3rem; }
.row-actions { display: inline-flex; gap: 0.25rem; margin-left: 0.4rem; font-family: system-ui, sans-serif; }
.row-actions button { font-size: 0.75rem; }
.lookup { display: block; font-size: 0.8rem; font-family: ui-monospace, monospace; word-break: break-all; margin-top: 0.25rem; }
.whatif { display: block; font-size: 0.8rem; }
.whatif p { margin: 0.25rem 0; }
.spread { list-style: none; padding: 0; margin: 0; font-variant-numeric: tabular-nums; }
.spread li { display: grid; grid-template-columns: 9rem 1fr; align-items: center; }
.spread .bar { display: block; height: 0.6rem; background: #2f855a; min-width: 1px; }
.spread .bar.over { background: #c53030; }
.actions form { display: flex; flex-wrap: wrap; gap: 0.4rem; align-items: end; margin-top: 0.5rem; font-size: 0.8rem; }
.actions input { width: 9rem; }
.actions input[type="number"] { width: 4.5rem; }
.overrides { font-size: 0.75rem; font-family: ui-monospace, monospace; padding-left: 1.2rem; }
.overrides button { font: inherit; background: none; border: none; color: #2b6cb0; cursor: pointer; text-align: left; }
#audit { margin-top: 1rem; background: #fff; border-radius: 6px; padding: 0.75rem; font-size: 0.8rem; }
#audit ol { font-family: ui-monospace, monospace; padding-left: 1.2rem; }
.blocks { font-size: 0.8rem; margin-top: 0.5rem; }
.blocks h3 { font-size: 0.8rem; margin: 0.5rem 0 0.25rem; }
.blocks ol, .entries { margin: 0; padding-left: 1.2rem; font-family: ui-monospace, monospace; word-break: break-all; }
.blocks li, .entries li { margin-bottom: 0.25rem; }
.blocks li button, .entries li button { margin-left: 0.4rem; font-family: system-ui, sans-serif; font-size: 0.75rem; }
.blocks-status { margin: 0.25rem 0; color: #4a5568; }
.protect { margin-top: 1rem; background: #fff; border-radius: 6px; padding: 0.75rem; overflow-x: auto; }
.protect h2 { margin: 0 0 0.5rem; font-size: 1.1rem; }
.protect .counts thead th { color: inherit; }
.protect .counts th:nth-child(-n + 4), .protect .counts td:nth-child(-n + 4) { text-align: left; }
.live-list { border-top: 1px solid #edf2f7; padding: 0.5rem 0; font-size: 0.85rem; }
.live-list summary { cursor: pointer; display: flex; align-items: center; gap: 0.5rem; flex-wrap: wrap; }
.live-list h3 { margin: 0; font-size: 0.95rem; }
.live-list form { margin: 0.5rem 0; }
.signin { max-width: 22rem; margin: 10vh auto; background: #fff; padding: 1.5rem; border-radius: 6px; }
.signin form { display: grid; gap: 0.5rem; }
.hint { color: #718096; font-size: 0.8rem; }
@media (max-width: 700px), (pointer: coarse) {
  body { padding: 0.5rem; }
  #rules { grid-template-columns: 1fr; }
  .health { gap: 0.75rem; }
  button, select, summary, input { min-height: 44px; min-width: 44px; }
  input, select, textarea { font-size: 16px; }
  button { font-size: 16px; padding: 0 0.75rem; }
  .row-actions button, .overrides button { font-size: 14px; }
  .lists a { display: inline-flex; align-items: center; min-height: 44px; min-width: 44px; }
  .actions input, .actions input[type="number"] { width: 100%; }
  .actions label { flex: 1 1 8rem; display: flex; flex-direction: column; }
  .label { font-family: system-ui, sans-serif; background: #ebf8ff; color: #2a4365; border-radius: 4px; padding: 0 0.3rem; }
.row-actions { display: flex; margin: 0.25rem 0 0.5rem; }
}
`;
