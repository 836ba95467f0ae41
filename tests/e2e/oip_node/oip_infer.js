// One Open Inference Protocol ModelInfer per task from Node, with
// @grpc/grpc-js and @grpc/proto-loader over the test copy of the protocol's
// proto (tests/oip/grpc_service.proto): an independent client, as a Node
// user of KServe or Triton would write it. Used by tests/e2e/test_oip_grpc.py.
//
// Usage: node oip_infer.js HOST:PORT PROTO_DIR < {"texts", "question",
// "contexts", "query", "documents"}
// Prints {"classify"|"answer"|"rerank": {OUTPUT: [datatype, shape, values]}}.
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [target, protoDir] = process.argv.slice(2);
const definition = protoLoader.loadSync(path.join(protoDir, 'grpc_service.proto'), {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true, includeDirs: [protoDir],
});
const inference = grpc.loadPackageDefinition(definition).inference;
const client = new inference.GRPCInferenceService(target, grpc.credentials.createInsecure());

function bytesInput(name, values, shape) {
  return {name, datatype: 'BYTES', shape, contents: {bytes_contents: values.map((v) => Buffer.from(v, 'utf8'))}};
}

function outputs(response) {
  const out = {};
  for (const o of response.outputs) {
    const c = o.contents;
    let values;
    switch (o.datatype) {
      case 'BYTES': values = c.bytes_contents.map((b) => b.toString('utf8')); break;
      case 'FP32': values = c.fp32_contents; break;
      case 'INT64': values = c.int64_contents; break;
      case 'BOOL': values = c.bool_contents; break;
      default: throw new Error(`unexpected datatype ${o.datatype}`);
    }
    out[o.name] = [o.datatype, o.shape.map(Number), values];
  }
  return out;
}

function infer(request) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + 60000);
    client.ModelInfer(request, {deadline}, (err, response) => (err ? reject(err) : resolve(outputs(response))));
  });
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const input = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const result = {};
  result.classify = await infer({
    model_name: 'classify',
    inputs: [bytesInput('TEXT', input.texts, [input.texts.length, 1])],
  });
  result.answer = await infer({
    model_name: 'answer',
    inputs: [bytesInput('QUESTION', [input.question], [1]),
             bytesInput('CONTEXT', input.contexts, [input.contexts.length])],
  });
  result.rerank = await infer({
    model_name: 'rerank',
    inputs: [bytesInput('QUERY', [input.query], [1]),
             bytesInput('DOCUMENTS', input.documents, [input.documents.length])],
  });
  process.stdout.write(JSON.stringify(result));
  client.close();
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
