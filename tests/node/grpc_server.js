// grpc-js (not grpcio) serving a token stream and KServe ModelInfer for the real-stack
// tests: `node grpc_server.js PREFILL_MS TOKEN_MS`. Binds 127.0.0.1 on a free port,
// prints "READY <port>", stops when stdin closes.
"use strict";
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const prefillMs = Number(process.argv[2] || 10);
const tokenMs = Number(process.argv[3] || 4);
const load = (file) =>
  grpc.loadPackageDefinition(loader.loadSync(path.join(__dirname, file), { keepCase: true, defaults: true }));
const inference = load("llm.proto").inference;
const llm = load("tokens.proto").tailtap.test;

function generate(call) {
  const n = call.request.max_tokens;
  let i = 0;
  const next = () => {
    if (call.cancelled) return;
    if (i >= n) {
      call.end();
      return;
    }
    call.write({ index: i, text: ` tok${i}` });
    i += 1;
    setTimeout(next, tokenMs);
  };
  setTimeout(next, prefillMs);
}

function modelInfer(call, callback) {
  const r = call.request;
  setTimeout(() => callback(null, { model_name: r.model_name, model_version: r.model_version, id: r.id }), 2);
}

const server = new grpc.Server();
server.addService(llm.LLM.service, { Generate: generate });
server.addService(inference.GRPCInferenceService.service, { ModelInfer: modelInfer });
server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log(`READY ${port}`);
});
process.stdin.on("end", () => server.tryShutdown(() => process.exit(0)));
process.stdin.resume();
