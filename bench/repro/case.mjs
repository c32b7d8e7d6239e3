// Runs a case written by make_case.py with onnxruntime-web (in Node or in a page) and returns
// every graph output on the CPU. `load(file)` gives a file of the case folder as an ArrayBuffer.
const ARRAYS = { float32: Float32Array, int64: BigInt64Array, float16: Uint16Array, bool: Uint8Array, int32: Int32Array };

export async function runCase(ort, load, { ep = 'wasm', modelBytes = null, options = {} } = {}) {
  const c = JSON.parse(new TextDecoder().decode(await load('case.json')));
  const feeds = {};
  for (const i of c.inputs) {
    const A = ARRAYS[i.type];
    const buf = await load(i.file);
    feeds[i.name] = new ort.Tensor(i.type, new A(buf), i.dims);
  }
  const model = modelBytes ?? new Uint8Array(await load('model.onnx'));
  const session = await ort.InferenceSession.create(model, {
    executionProviders: [ep],
    graphOptimizationLevel: 'all',
    // make_case.py keeps the weights in model.onnx_data; make_gqa.py's graph has none.
    ...(c.external_data === false ? {} : { externalData: [{ path: 'model.onnx_data', data: new Uint8Array(await load('model.onnx_data')) }] }),
    ...options,
  });
  const out = await session.run(feeds);
  const res = {};
  for (const [name, t] of Object.entries(out)) {
    const d = await t.getData();
    res[name] = { type: t.type, dims: t.dims, data: d };
  }
  await session.release();
  return { version: ort.env.versions?.web ?? null, outputs: res };
}
