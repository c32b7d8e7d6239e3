// An IEEE half-precision value (its 16 bits as a number) as a JavaScript number: the bench page
// reads float16 logits with it where the browser has no Float16Array, and bench/repro/compare.mjs
// reads float16 outputs with it in Node.
export function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}
