/**
 * A hand-written SVG step chart of admitted vs offered requests per second over time (no chart
 * dependency): offered as a grey area, admitted as a coloured area on top, the average rate the rule
 * allows as a dashed line, and fixed-window boundaries as dotted verticals.
 */

const WIDTH = 760;
const HEIGHT = 300;
const MARGIN = { left: 52, right: 20, top: 58, bottom: 44 };

const escapeXml = (text) =>
  String(text).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);

/** A "nice" axis maximum ≥ `value` (1, 2 or 5 × 10^k steps). */
function niceMax(value) {
  const step = 10 ** Math.floor(Math.log10(Math.max(value, 1)));
  for (const m of [1, 2, 5, 10]) if (m * step >= value) return m * step;
  return 10 * step;
}

/**
 * Renders one chart.
 * @param {object} chart
 * @param {string} chart.title
 * @param {string} chart.subtitle
 * @param {number} chart.binMs width of one bin
 * @param {number[]} chart.offered requests per second offered, per bin
 * @param {number[]} chart.admitted requests per second admitted, per bin
 * @param {number} chart.averageRate the rule's long-run rate, req/s (dashed line)
 * @param {number} chart.windowMs window length; a dotted vertical at each window boundary
 * @param {string} chart.color admitted colour
 * @returns {string} the SVG document
 */
export function renderChart({ title, subtitle, binMs, offered, admitted, averageRate, windowMs, color }) {
  const bins = offered.length;
  const durationS = (bins * binMs) / 1000;
  const yMax = niceMax(Math.max(...offered, ...admitted, averageRate) * 1.1);
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const x = (seconds) => MARGIN.left + (seconds / durationS) * plotW;
  const y = (rate) => MARGIN.top + plotH - (rate / yMax) * plotH;
  const r = (n) => Math.round(n * 10) / 10;

  /** A closed step-area path of `values` (one per bin). */
  const area = (values) => {
    let d = `M${r(x(0))},${r(y(0))}`;
    values.forEach((v, i) => {
      d += ` L${r(x((i * binMs) / 1000))},${r(y(v))} L${r(x(((i + 1) * binMs) / 1000))},${r(y(v))}`;
    });
    return `${d} L${r(x(durationS))},${r(y(0))} Z`;
  };
  const stepLine = (values) =>
    values
      .map(
        (v, i) =>
          `${i === 0 ? "M" : "L"}${r(x((i * binMs) / 1000))},${r(y(v))} L${r(x(((i + 1) * binMs) / 1000))},${r(y(v))}`,
      )
      .join(" ");

  const parts = [];
  const yStep = yMax / 5;
  for (let v = 0; v <= yMax + 1e-9; v += yStep) {
    parts.push(
      `<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${r(y(v))}" y2="${r(y(v))}" stroke="#e5e7eb"/>`,
      `<text x="${MARGIN.left - 6}" y="${r(y(v)) + 4}" text-anchor="end">${r(v)}</text>`,
    );
  }
  for (let s = 0; s <= durationS + 1e-9; s += windowMs / 1000) {
    parts.push(
      `<line x1="${r(x(s))}" x2="${r(x(s))}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#9ca3af" stroke-dasharray="2 3"/>`,
      `<text x="${r(x(s))}" y="${MARGIN.top + plotH + 16}" text-anchor="middle">${r(s)}</text>`,
    );
  }
  parts.push(
    `<path d="${area(offered)}" fill="#d1d5db" fill-opacity="0.8"/>`,
    `<path d="${area(admitted)}" fill="${color}" fill-opacity="0.35"/>`,
    `<path d="${stepLine(admitted)}" fill="none" stroke="${color}" stroke-width="2"/>`,
    `<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${r(y(averageRate))}" y2="${r(y(averageRate))}" stroke="#111827" stroke-dasharray="6 4"/>`,
    `<line x1="${MARGIN.left}" x2="${MARGIN.left}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#374151"/>`,
    `<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${MARGIN.top + plotH}" y2="${MARGIN.top + plotH}" stroke="#374151"/>`,
  );
  const legendY = 44;
  const legend = [
    `<rect x="${MARGIN.left}" y="${legendY - 9}" width="12" height="10" fill="#d1d5db"/>`,
    `<text x="${MARGIN.left + 16}" y="${legendY}">offered</text>`,
    `<rect x="${MARGIN.left + 80}" y="${legendY - 9}" width="12" height="10" fill="${color}" fill-opacity="0.6"/>`,
    `<text x="${MARGIN.left + 96}" y="${legendY}">admitted</text>`,
    `<line x1="${MARGIN.left + 170}" x2="${MARGIN.left + 196}" y1="${legendY - 4}" y2="${legendY - 4}" stroke="#111827" stroke-dasharray="6 4"/>`,
    `<text x="${MARGIN.left + 202}" y="${legendY}">average allowed rate</text>`,
    `<line x1="${MARGIN.left + 350}" x2="${MARGIN.left + 350}" y1="${legendY - 10}" y2="${legendY + 1}" stroke="#9ca3af" stroke-dasharray="2 3"/>`,
    `<text x="${MARGIN.left + 356}" y="${legendY}">window boundary</text>`,
  ];
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="11" fill="#374151">
<title>${escapeXml(title)}</title>
<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>
<text x="${MARGIN.left}" y="18" font-size="15" font-weight="600" fill="#111827">${escapeXml(title)}</text>
<text x="${MARGIN.left}" y="32">${escapeXml(subtitle)}</text>
${legend.join("\n")}
${parts.join("\n")}
<text x="${MARGIN.left + plotW / 2}" y="${HEIGHT - 6}" text-anchor="middle">seconds</text>
<text transform="translate(14 ${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">requests / s</text>
</svg>
`;
}
